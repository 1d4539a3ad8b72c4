#include "src/gcs/task_event_manager.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/ids.h"

namespace troupe {
namespace {

constexpr const char* kFilterKeys[] = {"task_id", "job_id", "node_id", "actor_id",
                                       "worker_id", "name", "state", "type"};

bool IsFilterKey(const std::string& key) {
  for (const char* known : kFilterKeys) {
    if (key == known) return true;
  }
  return false;
}

// The value `filter` compares against, taken from the record as a query returns it.
std::string FieldOf(const rpc::TaskRecord& task, const std::string& key) {
  if (key == "task_id") return BytesToHex(task.task_id());
  if (key == "job_id") return BytesToHex(task.job_id());
  if (key == "node_id") return BytesToHex(task.node_id());
  if (key == "actor_id") return BytesToHex(task.actor_id());
  if (key == "worker_id") return BytesToHex(task.worker_id());
  if (key == "name") return task.name();
  if (key == "state") return rpc::TaskEvent::State_Name(task.state());
  if (key == "type") return rpc::TaskSpec::Type_Name(task.type());
  return "";
}

bool Matches(const rpc::TaskRecord& task, const rpc::GetTaskEventsRequest& request) {
  for (const auto& filter : request.filters()) {
    if ((FieldOf(task, filter.key()) == filter.value()) == filter.not_equal()) return false;
  }
  return true;
}

// `binary` as an ID, or nullopt when it is not one (empty, or the wrong size).
template <typename Id>
std::optional<Id> IdOf(const std::string& binary) {
  if (binary.size() != Id::Size()) return std::nullopt;
  return *Id::FromBinary(binary);
}

JobId JobOf(const std::string& binary) { return IdOf<JobId>(binary).value_or(JobId::Nil()); }

template <typename Id>
void SetId(const Id& id, std::string* out) {
  if (!id.IsNil()) out->assign(reinterpret_cast<const char*>(id.data()), Id::Size());
}

}  // namespace

void TaskEventManager::AbandonIfUnfinished(int64_t time_us, Record* record) {
  if (record->state == rpc::TaskEvent::FINISHED || record->state == rpc::TaskEvent::FAILED) return;
  record->state = rpc::TaskEvent::FAILED;
  record->entered |= 1u << rpc::TaskEvent::FAILED;
  record->state_time_us[rpc::TaskEvent::FAILED] = time_us;
  record->abandoned = true;
  record->error_message = kAbandonedAtJobEnd;
}

void TaskEventManager::OnJobFinished(const JobId& job_id, int64_t time_us) {
  absl::MutexLock lock(&mu_);
  JobTasks& job = jobs_[job_id];
  if (job.finished_us != 0) return;
  job.finished_us = std::max<int64_t>(time_us, 1);
  for (const Key& key : job.order) AbandonIfUnfinished(job.finished_us, &records_.at(key));
}

void TaskEventManager::Merge(const rpc::TaskEvent& event, Record* record) {
  if (!event.name().empty()) record->name = NameRef(names_, event.name());
  if (event.type() != rpc::TaskSpec::NORMAL_TASK) record->type = event.type();
  if (auto id = IdOf<ActorId>(event.actor_id())) record->actor_id = *id;
  if (auto id = IdOf<NodeId>(event.node_id())) record->node_id = *id;
  if (auto id = IdOf<WorkerId>(event.worker_id())) record->worker_id = *id;
  if (event.worker_pid() != 0) record->worker_pid = event.worker_pid();
  if (!event.error_message().empty()) record->error_message = event.error_message();
  const int state = event.state();
  if (state <= rpc::TaskEvent::STATE_UNSPECIFIED || state >= kNumStates) return;
  if (record->abandoned && (state == rpc::TaskEvent::FINISHED || state == rpc::TaskEvent::FAILED)) {
    // The task's real end (its worker reported it while being stopped): it replaces the
    // abandonment, which was only a guess.
    record->abandoned = false;
    record->entered &= ~(1u << rpc::TaskEvent::FAILED);
    record->state = rpc::TaskEvent::SUBMITTED;  // the end below sets it
    if (record->error_message == kAbandonedAtJobEnd) record->error_message = event.error_message();
  }
  auto enter = [record](int entered, int64_t time_us) {
    record->entered |= 1u << entered;
    record->state_time_us[entered] = time_us;
  };
  if (event.submitted_time_us() != 0) enter(rpc::TaskEvent::SUBMITTED, event.submitted_time_us());
  if (event.start_time_us() != 0) enter(rpc::TaskEvent::RUNNING, event.start_time_us());
  enter(state, event.time_us());
  // States are numbered in the order a task goes through them.
  if (event.state() >= record->state) record->state = event.state();
}

void TaskEventManager::AddEventLocked(const rpc::TaskEvent& event) {
  auto task_id = IdOf<TaskId>(event.task_id());
  if (!task_id) {
    ++jobs_[JobOf(event.job_id())].dropped;
    return;
  }
  const Key key{*task_id, event.attempt()};
  auto [it, inserted] = records_.try_emplace(key);
  if (inserted) {
    it->second.seq = next_seq_++;
    it->second.job_id = JobOf(event.job_id());
    JobTasks& job = jobs_[it->second.job_id];
    job.order.push_back(key);
    all_order_.emplace_back(key, it->second.seq);
    const bool over_job = static_cast<int64_t>(job.order.size()) > options_.max_tasks_per_job;
    const bool over_total = static_cast<int64_t>(records_.size()) > options_.max_tasks;
    if (over_job || over_total) {
      while (static_cast<int64_t>(job.order.size()) > options_.max_tasks_per_job) {
        records_.erase(job.order.front());
        job.order.pop_front();
        ++job.dropped;
      }
      ForgetBeyondTotalLocked();
      it = records_.find(key);
      if (it == records_.end()) return;  // a cap of 0 forgets at once
    }
  }
  Merge(event, &it->second);
  // A late report of a finished job's attempt that says no end: abandoned too.
  const rpc::TaskEvent::State merged = it->second.state;
  if (merged != rpc::TaskEvent::FINISHED && merged != rpc::TaskEvent::FAILED) {
    auto job = jobs_.find(it->second.job_id);
    if (job != jobs_.end() && job->second.finished_us != 0) {
      AbandonIfUnfinished(job->second.finished_us, &it->second);
    }
  }
}

void TaskEventManager::ForgetBeyondTotalLocked() {
  while (static_cast<int64_t>(records_.size()) > options_.max_tasks && !all_order_.empty()) {
    const auto [key, seq] = all_order_.front();
    all_order_.pop_front();
    auto it = records_.find(key);
    if (it == records_.end() || it->second.seq != seq) continue;  // its job's cap forgot it
    // The oldest record of all is the oldest of its job.
    JobTasks& job = jobs_[it->second.job_id];
    if (!job.order.empty() && job.order.front() == key) job.order.pop_front();
    ++job.dropped;
    records_.erase(it);
  }
  if (all_order_.size() > 2 * records_.size() + 1024) {
    std::deque<std::pair<Key, uint64_t>> live;
    for (const auto& [key, seq] : all_order_) {
      auto it = records_.find(key);
      if (it != records_.end() && it->second.seq == seq) live.emplace_back(key, seq);
    }
    all_order_.swap(live);
  }
}

void TaskEventManager::AddEvents(const rpc::AddTaskEventDataRequest& request) {
  absl::MutexLock lock(&mu_);
  for (const auto& event : request.events()) AddEventLocked(event);
  for (const auto& dropped : request.dropped()) {
    jobs_[JobOf(dropped.job_id())].dropped += dropped.count();
  }
}

void TaskEventManager::ToProto(const Key& key, const Record& record, rpc::TaskRecord* out) {
  out->set_task_id(reinterpret_cast<const char*>(key.task_id.data()), TaskId::Size());
  out->set_attempt(key.attempt);
  SetId(record.job_id, out->mutable_job_id());
  const absl::string_view name = record.name.view();
  out->set_name(name.data(), name.size());
  out->set_type(record.type);
  SetId(record.actor_id, out->mutable_actor_id());
  out->set_state(record.state);
  for (int state = 0; state < kNumStates; ++state) {
    if (record.entered & (1u << state)) {
      (*out->mutable_state_time_us())[state] = record.state_time_us[state];
    }
  }
  SetId(record.node_id, out->mutable_node_id());
  SetId(record.worker_id, out->mutable_worker_id());
  out->set_worker_pid(record.worker_pid);
  out->set_error_message(record.error_message);
}

absl::StatusOr<rpc::GetTaskEventsReply> TaskEventManager::GetTaskEvents(
    const rpc::GetTaskEventsRequest& request) const {
  std::optional<JobId> job_filter;  // for a job_id=... filter: only that job is read
  bool no_job = false;              // a job_id=... filter naming no possible job
  for (const auto& filter : request.filters()) {
    if (!IsFilterKey(filter.key())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown task filter key '", filter.key(),
          "'; use task_id, name, state, job_id, node_id, actor_id, worker_id or type"));
    }
    if (filter.key() == "job_id" && !filter.not_equal()) {
      auto job = JobId::FromHex(filter.value());
      if (job.ok()) {
        job_filter = *job;
      } else {
        no_job = true;
      }
    }
  }
  rpc::GetTaskEventsReply reply;
  if (no_job) return reply;
  // Matching records with their creation order; protobuf only for what is compared or returned.
  std::vector<std::pair<uint64_t, const Key*>> matched;
  absl::MutexLock lock(&mu_);
  auto scan = [&](const JobTasks& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reply.set_num_dropped(reply.num_dropped() + job.dropped);
    rpc::TaskRecord task;
    for (const Key& key : job.order) {
      const Record& record = records_.at(key);
      if (request.filters_size() > 0) {
        task.Clear();
        ToProto(key, record, &task);
        if (!Matches(task, request)) continue;
      }
      matched.emplace_back(record.seq, &key);
    }
  };
  if (job_filter) {
    if (auto it = jobs_.find(*job_filter); it != jobs_.end()) scan(it->second);
  } else {
    for (const auto& [id, job] : jobs_) scan(job);
  }
  std::sort(matched.begin(), matched.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  reply.set_total(static_cast<int64_t>(matched.size()));
  const size_t limit = request.limit() > 0 ? static_cast<size_t>(request.limit()) : matched.size();
  for (size_t i = 0; i < matched.size() && i < limit; ++i) {
    const Key& key = *matched[i].second;
    ToProto(key, records_.at(key), reply.add_tasks());
  }
  return reply;
}

size_t TaskEventManager::num_records() const {
  absl::MutexLock lock(&mu_);
  return records_.size();
}

}  // namespace troupe
