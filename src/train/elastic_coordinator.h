// The membership of one elastic DataParallelTrainer attempt, on the driver: which worker holds
// which rank in which generation of the workers' collective groups, and what failures do to it.
// A failure (a worker's death, or a survivor's report naming a rank of the current generation)
// excludes the worker: it is killed (fencing: a stopped or cut-off process must never come
// back), and the survivors form the next generation with ranks in their previous order — or,
// below min_workers, nothing is declared and the attempt must restart from the checkpoint.
// Observations about an earlier generation or an excluded worker are stale and ignored.
//
// Replacements (max_workers > 0): the driver starts a worker per vacancy (max_workers less the
// members and the replacements waiting); once one says it is ready the coordinator proposes a
// join to the current generation's members, who answer when they all stand at a step boundary;
// only then is the next generation declared, the survivors first in their order, then the
// replacements (ranks stay 0..n-1). A proposal is per generation: a leave in the meantime makes
// a new generation, and the proposal is made again to it.
//
// Pure logic: the cluster calls (declare a generation, kill a worker) are injected, so it runs on
// fakes in tests. Not thread-safe: the trainer's driver thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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
    // `joined`: the workers it adds (the last ranks), after a step boundary.
    std::function<void(int64_t generation, const std::vector<int>& members,
                       const std::vector<int>& left, const std::vector<int>& joined)>
        declare;
    std::function<void(int worker)> kill;
    // Proposes to the members of `generation` that replacements join at their next step
    // boundary (they answer through OnBoundary).
    std::function<void(int64_t generation)> propose;
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
    kJoined,        // replacements joined: the next generation is declared
  };

  // `max_workers`: the most members replacements may bring the group back to; 0: none.
  ElasticCoordinator(int num_workers, int min_workers, int max_workers, Cluster cluster);

  // Declares generation 1: every worker, worker i as rank i.
  void Start();
  // Applies observations made together (so two members lost at once make one generation).
  // `event` describes the change unless the verdict is kUnchanged.
  // A failure of a replacement not yet joined (worker >= 0) withdraws it.
  Verdict OnFailures(const std::vector<Failure>& failures, MembershipEvent* event);

  // Replacements started now (new worker numbers, never reused) to fill the vacancies.
  int Vacancies() const;
  void OnReplacementStarted(int worker);
  // Replacement `worker` is ready to join (it asked at `time_ms`): a join is proposed to the
  // current generation unless it is already. Unknown or withdrawn workers are ignored.
  void OnReady(int worker, int64_t time_ms);
  // The members of `generation` stand at a step boundary after `step` steps, answering a
  // proposal. For the current generation: declares the next one with every ready replacement
  // (kJoined, `event` describes it), or with the same members when none is left (kUnchanged:
  // they must not wait). For an earlier generation, or without a proposal: stale, kUnchanged.
  Verdict OnBoundary(int64_t generation, int64_t step, MembershipEvent* event);
  // The generation a join is proposed to (0: none outstanding).
  int64_t proposed() const { return proposed_; }
  // Replacements started and not yet members or withdrawn, in the order started.
  const std::vector<int>& waiting() const { return waiting_; }

  int64_t generation() const { return generation_; }
  const std::vector<int>& members() const { return members_; }  // workers by rank
  bool IsMember(int worker) const;

 private:
  void ProposeIfReady();

  const int min_workers_;
  const int max_workers_;
  Cluster cluster_;
  int64_t generation_ = 0;
  std::vector<int> members_;
  std::set<int> excluded_;
  std::vector<int> waiting_;      // replacements started, not yet members
  std::map<int, int64_t> ready_;  // of those, the ready ones: when they asked
  int64_t proposed_ = 0;          // the generation a join is proposed to (0: none)
};

}  // namespace troupe::train::internal
