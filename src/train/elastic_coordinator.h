// The membership of one elastic DataParallelTrainer attempt, on the driver: which worker holds
// which rank in which generation of the workers' collective groups, and what failures do to it.
// A failure (a worker's death, or a survivor's report naming a rank of the current generation)
// excludes the worker: it is killed (fencing: a stopped or cut-off process must never come
// back), and the survivors form the next generation with ranks in their previous order — or,
// below min_workers, nothing is declared and the attempt must restart from the checkpoint.
// Observations about an earlier generation or an excluded worker are stale and ignored.
//
// Pure logic: the cluster calls (declare a generation, kill a worker) are injected, so it runs on
// fakes in tests. Not thread-safe: the trainer's driver thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "troupe/train.h"

namespace troupe::train::internal {

class ElasticCoordinator {
 public:
  struct Cluster {
    // Declares generation `generation` of the workers' groups: members[r] (a worker, numbered
    // 0..num_workers-1 as placed) is rank r; `left`: the ranks of the previous generation that
    // left (empty for generation 1).
    std::function<void(int64_t generation, const std::vector<int>& members,
                       const std::vector<int>& left)>
        declare;
    std::function<void(int worker)> kill;
  };

  // One observation of the driver's.
  struct Failure {
    int worker = -1;         // a worker whose loop ended by its death; or -1, and then:
    int64_t generation = 0;  // a survivor's report that rank `rank` of `generation` failed
    int rank = -1;
    std::string why;      // "died", "hung", "failed"
    std::string detail;   // the error, as observed
    int64_t step = -1;    // the step it happened in, -1 if unknown
    int64_t time_ms = 0;  // when it was noticed (unix ms)
  };

  enum class Verdict {
    kUnchanged,     // every observation was stale
    kContinue,      // the next generation is declared; the survivors go on
    kBelowMinimum,  // fewer than min_workers are left: restart from the checkpoint
  };

  ElasticCoordinator(int num_workers, int min_workers, Cluster cluster);

  // Declares generation 1: every worker, worker i as rank i.
  void Start();
  // Applies observations made together (so two members lost at once make one generation).
  // `event` describes the change unless the verdict is kUnchanged.
  Verdict OnFailures(const std::vector<Failure>& failures, MembershipEvent* event);

  int64_t generation() const { return generation_; }
  const std::vector<int>& members() const { return members_; }  // workers by rank
  bool IsMember(int worker) const;

 private:
  const int min_workers_;
  Cluster cluster_;
  int64_t generation_ = 0;
  std::vector<int> members_;
  std::set<int> excluded_;
};

}  // namespace troupe::train::internal
