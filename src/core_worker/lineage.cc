#include "src/core_worker/lineage.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace troupe {
namespace {
constexpr size_t kEvictedRemembered = 100000;
}  // namespace

void Lineage::Record(const rpc::TaskSpec& spec, const std::vector<ObjectId>& owned_args) {
  auto task = TaskId::FromBinary(spec.task_id());
  if (!task.ok()) return;
  absl::MutexLock lock(&mu_);
  if (entries_.contains(*task)) return;
  Entry& entry = entries_[*task];
  spec.SerializeToString(&entry.spec);
  entry.attempt = spec.attempt();
  entry.referenced_returns = std::max(1, spec.num_returns());
  entry.owned_args = owned_args;
  for (const ObjectId& arg : owned_args) {
    if (auto it = entries_.find(arg.CreatingTaskId()); it != entries_.end()) {
      it->second.dependents++;
    }
  }
  bytes_ += static_cast<int64_t>(entry.spec.size());
  order_.push_back(*task);
  EvictLocked();
}

void Lineage::Finished(const rpc::TaskSpec& spec) {
  auto task = TaskId::FromBinary(spec.task_id());
  if (!task.ok()) return;
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(*task);
  if (it == entries_.end()) return;
  it->second.rebuilding = false;
  it->second.attempt = std::max(it->second.attempt, spec.attempt());
}

void Lineage::ReleaseObject(const ObjectId& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id.CreatingTaskId());
  if (it == entries_.end()) return;
  if (it->second.referenced_returns > 0) it->second.referenced_returns--;
  MaybeDropLocked(id.CreatingTaskId());
}

void Lineage::MaybeDropLocked(const TaskId& task) {
  auto it = entries_.find(task);
  if (it == entries_.end()) return;
  if (it->second.referenced_returns > 0 || it->second.dependents > 0 || it->second.rebuilding) {
    return;
  }
  DropLocked(task, /*evicted=*/false);
}

void Lineage::DropLocked(const TaskId& task, bool evicted) {
  auto it = entries_.find(task);
  if (it == entries_.end()) return;
  std::vector<ObjectId> args = std::move(it->second.owned_args);
  bytes_ -= static_cast<int64_t>(it->second.spec.size());
  entries_.erase(it);
  if (evicted && evicted_.insert(task).second) {
    evicted_order_.push_back(task);
    if (evicted_order_.size() > kEvictedRemembered) {
      evicted_.erase(evicted_order_.front());
      evicted_order_.pop_front();
    }
  }
  for (const ObjectId& arg : args) {
    auto dep = entries_.find(arg.CreatingTaskId());
    if (dep == entries_.end()) continue;
    dep->second.dependents--;
    MaybeDropLocked(arg.CreatingTaskId());
  }
}

void Lineage::EvictLocked() {
  while (bytes_ > options_.max_bytes && !order_.empty()) {
    const TaskId oldest = order_.front();
    order_.pop_front();
    DropLocked(oldest, /*evicted=*/true);
  }
  // Keep the order queue from growing with IDs that were dropped already.
  if (order_.size() > 2 * entries_.size() + 1024) {
    std::deque<TaskId> live;
    for (const TaskId& task : order_) {
      if (entries_.contains(task)) live.push_back(task);
    }
    order_.swap(live);
  }
}

Lineage::Plan Lineage::PlanReconstruction(const ObjectId& id, bool is_put,
                                          const std::string& what_happened) {
  Plan plan;
  const std::string object = absl::StrCat("object ", id.Hex(), " ");
  if (is_put) {
    plan.error = StoredObject::Error::kLost;
    plan.message = absl::StrCat(object, "was created by Put and ", what_happened,
                                "; objects made by Put have no lineage and cannot be rebuilt");
    return plan;
  }
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id.CreatingTaskId());
  if (it == entries_.end()) {
    plan.error = StoredObject::Error::kReconstructionFailed;
    plan.message =
        evicted_.contains(id.CreatingTaskId())
            ? absl::StrCat(object, what_happened,
                           ", and cannot be rebuilt: the spec of the task that made it was "
                           "evicted by the lineage budget (",
                           options_.max_bytes, " bytes of task specs per process)")
            : absl::StrCat(object, what_happened,
                           ", and cannot be rebuilt: no lineage is kept for it (only the results "
                           "of normal tasks can be rebuilt, not those of actor calls)");
    return plan;
  }
  Entry& entry = it->second;
  rpc::TaskSpec spec;
  if (!spec.ParseFromString(entry.spec)) {  // it was serialized here: cannot happen
    plan.error = StoredObject::Error::kReconstructionFailed;
    plan.message = absl::StrCat(object, what_happened,
                                ", and cannot be rebuilt: its task's recorded spec is unreadable");
    return plan;
  }
  spec.set_attempt(entry.attempt);
  if (spec.max_retries() >= 0 && spec.attempt() >= spec.max_retries()) {
    plan.error = StoredObject::Error::kReconstructionFailed;
    plan.message = absl::StrCat(object, "(returned by task ", spec.function_name(), ") ",
                                what_happened, ", and cannot be rebuilt: the task already ran ",
                                spec.attempt() + 1, " time(s) and max_retries is ",
                                spec.max_retries(), " (SetMaxRetries raises the limit)");
    return plan;
  }
  spec.set_attempt(++entry.attempt);
  entry.rebuilding = true;
  plan.resubmit = true;
  plan.spec = std::move(spec);
  return plan;
}

bool Lineage::IsBeingRebuilt(const ObjectId& id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id.CreatingTaskId());
  return it != entries_.end() && it->second.rebuilding;
}

size_t Lineage::num_entries() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

int64_t Lineage::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace troupe
