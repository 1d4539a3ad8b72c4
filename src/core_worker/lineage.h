// Lineage: the specs of the tasks this process submitted, kept so that an object they returned
// can be rebuilt by running its task again when every copy of it is lost (its node died).
//
// A task's spec is kept while one of its return objects is referenced, and beyond that while a kept
// spec of another task takes that object as an argument (so a lost result can be rebuilt even when
// its arguments were freed meanwhile: they are rebuilt first, recursively). Specs are charged
// by their serialized size against a budget (`max_bytes`); past it the oldest are evicted, and
// a later loss of their objects fails as unreconstructable, saying so. Objects made by Put and
// actor calls have no lineage: their loss is final.
//
// Pure bookkeeping (no I/O): SubmissionFacade owns it and decides what to resubmit from
// PlanReconstruction's answer. Thread-safe (one mutex); no callbacks.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "proto/common.pb.h"
#include "src/common/ids.h"
#include "src/core_worker/memory_store.h"

namespace troupe {

class Lineage {
 public:
  struct Options {
    // Bytes of task specs kept (serialized size); the oldest are evicted beyond it.
    int64_t max_bytes = 64 << 20;
  };

  // What to do about a lost object: run `spec` again (its `attempt` already counts this run),
  // or fail its readers with `error` and `message`.
  struct Plan {
    bool resubmit = false;
    rpc::TaskSpec spec;
    StoredObject::Error error = StoredObject::Error::kNone;
    std::string message;
  };

  explicit Lineage(Options options) : options_(options) {}

  // A normal task was submitted. `owned_args`: the IDs of by-reference arguments this process
  // owns (their lineage is kept as long as this spec is).
  void Record(const rpc::TaskSpec& spec, const std::vector<ObjectId>& owned_args);
  // The task's run finished (reply or failure): `spec` carries the attempt it ended at. Clears
  // the "being rebuilt" mark.
  void Finished(const rpc::TaskSpec& spec);
  // Nothing references `id` any more: once no return of its task is referenced, its spec goes
  // unless a kept spec depends on it.
  void ReleaseObject(const ObjectId& id);

  // Every copy of `id` is gone. `is_put`: it was made by Put. `what_happened` completes the
  // sentence "object <id> ..." (e.g. "was on node N, which died"). Resubmitting marks the task
  // as being rebuilt.
  Plan PlanReconstruction(const ObjectId& id, bool is_put, const std::string& what_happened);
  // Whether `id`'s task is being run again (its readers should wait, not rebuild it again).
  bool IsBeingRebuilt(const ObjectId& id) const;

  size_t num_entries() const;
  int64_t bytes() const;

 private:
  struct Entry {
    // Serialized: one allocation instead of a parsed message's many (a driver keeps one per
    // referenced result: ~0.9 KiB less each, measured with 100,000 tasks); parsed only to run
    // the task again.
    std::string spec;
    int32_t attempt = 0;  // the latest attempt (the serialized spec's may be older)
    std::vector<ObjectId> owned_args;
    int referenced_returns = 1;  // its return objects not freed yet (spec.num_returns())
    int dependents = 0;  // kept specs taking this task's return as an argument
    bool rebuilding = false;
  };
  // Drops `task` if nothing needs it any more, and what that frees in turn.
  void MaybeDropLocked(const TaskId& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropLocked(const TaskId& task, bool evicted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<TaskId, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<TaskId> order_ ABSL_GUARDED_BY(mu_);  // recording order (may hold dropped IDs)
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Tasks whose specs the budget evicted (the most recent 100 000), to explain a later loss.
  absl::flat_hash_set<TaskId> evicted_ ABSL_GUARDED_BY(mu_);
  std::deque<TaskId> evicted_order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
