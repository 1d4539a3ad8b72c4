#include "src/gcs/task_event_manager.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/ids.h"

namespace troupe {
namespace {

// The value a filter compares against; false for an unknown key.
bool FieldOf(const rpc::TaskRecord& task, const std::string& key, std::string* value) {
  if (key == "task_id") {
    *value = BytesToHex(task.task_id());
  } else if (key == "job_id") {
    *value = BytesToHex(task.job_id());
  } else if (key == "node_id") {
    *value = BytesToHex(task.node_id());
  } else if (key == "actor_id") {
    *value = BytesToHex(task.actor_id());
  } else if (key == "worker_id") {
    *value = BytesToHex(task.worker_id());
  } else if (key == "name") {
    *value = task.name();
  } else if (key == "state") {
    *value = rpc::TaskEvent::State_Name(task.state());
  } else if (key == "type") {
    *value = rpc::TaskSpec::Type_Name(task.type());
  } else {
    return false;
  }
  return true;
}

bool Matches(const rpc::TaskRecord& task, const rpc::GetTaskEventsRequest& request) {
  std::string value;
  for (const auto& filter : request.filters()) {
    FieldOf(task, filter.key(), &value);
    if ((value == filter.value()) == filter.not_equal()) return false;
  }
  return true;
}

}  // namespace

std::string TaskEventManager::KeyOf(const std::string& task_id, int32_t attempt) {
  return absl::StrCat(task_id, "#", attempt);
}

void TaskEventManager::Merge(const rpc::TaskEvent& event, rpc::TaskRecord* task) {
  if (!event.name().empty()) task->set_name(event.name());
  if (event.type() != rpc::TaskSpec::NORMAL_TASK) task->set_type(event.type());
  if (!event.actor_id().empty()) task->set_actor_id(event.actor_id());
  if (!event.node_id().empty()) task->set_node_id(event.node_id());
  if (!event.worker_id().empty()) task->set_worker_id(event.worker_id());
  if (event.worker_pid() != 0) task->set_worker_pid(event.worker_pid());
  if (!event.error_message().empty()) task->set_error_message(event.error_message());
  if (event.state() == rpc::TaskEvent::STATE_UNSPECIFIED) return;
  (*task->mutable_state_time_us())[event.state()] = event.time_us();
  if (event.start_time_us() != 0) {
    (*task->mutable_state_time_us())[rpc::TaskEvent::RUNNING] = event.start_time_us();
  }
  // States are numbered in the order a task goes through them.
  if (event.state() >= task->state()) task->set_state(event.state());
}

void TaskEventManager::AddEventLocked(const rpc::TaskEvent& event) {
  const std::string key = KeyOf(event.task_id(), event.attempt());
  auto [it, inserted] = records_.try_emplace(key);
  if (inserted) {
    it->second.seq = next_seq_++;
    rpc::TaskRecord& task = it->second.task;
    task.set_task_id(event.task_id());
    task.set_attempt(event.attempt());
    task.set_job_id(event.job_id());
    JobTasks& job = jobs_[event.job_id()];
    job.order.push_back(key);
    while (static_cast<int64_t>(job.order.size()) > options_.max_tasks_per_job) {
      records_.erase(job.order.front());
      job.order.pop_front();
      ++job.dropped;
    }
    it = records_.find(key);
    if (it == records_.end()) return;  // a cap of 0 forgets at once
  }
  Merge(event, &it->second.task);
}

void TaskEventManager::AddEvents(const rpc::AddTaskEventDataRequest& request) {
  absl::MutexLock lock(&mu_);
  for (const auto& event : request.events()) AddEventLocked(event);
  for (const auto& dropped : request.dropped()) jobs_[dropped.job_id()].dropped += dropped.count();
}

absl::StatusOr<rpc::GetTaskEventsReply> TaskEventManager::GetTaskEvents(
    const rpc::GetTaskEventsRequest& request) const {
  std::string job_filter;  // binary; set for a job_id=... filter: only that job is read
  bool one_job = false;
  for (const auto& filter : request.filters()) {
    std::string unused;
    if (!FieldOf(rpc::TaskRecord(), filter.key(), &unused)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown task filter key '", filter.key(),
          "'; use task_id, name, state, job_id, node_id, actor_id, worker_id or type"));
    }
    if (filter.key() == "job_id" && !filter.not_equal()) {
      auto job = HexToBytes(filter.value());
      one_job = true;
      job_filter = job.ok() ? *job : "-";  // not hex: matches no job
    }
  }
  rpc::GetTaskEventsReply reply;
  std::vector<const Record*> matched;
  absl::MutexLock lock(&mu_);
  auto scan = [&](const JobTasks& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reply.set_num_dropped(reply.num_dropped() + job.dropped);
    for (const auto& key : job.order) {
      const Record& record = records_.at(key);
      if (Matches(record.task, request)) matched.push_back(&record);
    }
  };
  if (one_job) {
    if (auto it = jobs_.find(job_filter); it != jobs_.end()) scan(it->second);
  } else {
    for (const auto& [id, job] : jobs_) scan(job);
  }
  std::sort(matched.begin(), matched.end(),
            [](const Record* a, const Record* b) { return a->seq < b->seq; });
  reply.set_total(static_cast<int64_t>(matched.size()));
  const size_t limit = request.limit() > 0 ? static_cast<size_t>(request.limit()) : matched.size();
  for (size_t i = 0; i < matched.size() && i < limit; ++i) *reply.add_tasks() = matched[i]->task;
  return reply;
}

size_t TaskEventManager::num_records() const {
  absl::MutexLock lock(&mu_);
  return records_.size();
}

}  // namespace troupe
