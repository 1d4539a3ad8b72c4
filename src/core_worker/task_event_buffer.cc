#include "src/core_worker/task_event_buffer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/strip.h"
#include "google/protobuf/arena.h"

namespace troupe {
namespace {

template <typename Id>
Id IdOrNil(const std::string& binary) {
  auto id = Id::FromBinary(binary);
  return id.ok() ? *id : Id::Nil();
}

int64_t MicrosOrZero(absl::Time time) {
  return time == absl::InfinitePast() ? 0 : absl::ToUnixMicros(time);
}

}  // namespace

TaskStateEvent TaskStateEventOf(const rpc::TaskSpec& spec) {
  TaskStateEvent event;
  event.task_id = IdOrNil<TaskId>(spec.task_id());
  event.attempt = spec.attempt();
  event.job_id = IdOrNil<JobId>(spec.job_id());
  return event;
}

TaskEventBuffer::TaskEventBuffer(Options options, Report report)
    : options_(options), report_(std::move(report)), names_(options.max_names) {}

void TaskEventBuffer::Record(TaskStateEvent event) {
  absl::MutexLock lock(&mu_);
  AppendLocked(BufferedLocked(std::move(event)));
}

TaskEventBuffer::Buffered TaskEventBuffer::BufferedLocked(TaskStateEvent event) {
  Buffered out;
  out.task_id = event.task_id;
  out.job_id = event.job_id;
  out.actor_id = event.actor_id;
  out.attempt = event.attempt;
  out.state = event.state;
  out.type = event.type;
  out.time = event.time;
  out.submitted_time = event.submitted_time;
  // A method registered as TROUPE_REMOTE(&Store::Fail) is shown as Store::Fail.
  out.name = NameRef(names_, absl::StripPrefix(event.name, "&"));
  out.error_message = std::move(event.error_message);
  return out;
}

void TaskEventBuffer::AppendLocked(Buffered event) {
  if (events_.size() >= options_.max_buffered_events) {
    ++unreported_drops_[event.job_id];
    num_dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  events_.push_back(std::move(event));
}

uint64_t TaskEventBuffer::BeginRunning(TaskStateEvent running) {
  running.state = rpc::TaskEvent::RUNNING;
  absl::MutexLock lock(&mu_);
  const uint64_t token = next_token_++;
  Buffered& event = running_[token].event;
  event = BufferedLocked(std::move(running));
  event.executed_here = true;
  return token;
}

void TaskEventBuffer::EndRunning(uint64_t token, rpc::TaskEvent::State state, absl::Time end,
                                 std::string error_message) {
  bool reported = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(token);
    if (it == running_.end()) return;
    Buffered event = std::move(it->second.event);
    reported = it->second.reported;
    running_.erase(it);
    if (!reported) event.start_time = event.time;
    event.state = state;
    event.time = end;
    event.error_message = std::move(error_message);
    AppendLocked(std::move(event));
  }
  // The GCS shows this run RUNNING: report its end before the caller hears of it, so a process
  // killed once its caller has the result (an actor torn down after its last call) leaves no
  // task RUNNING forever. Only runs that outlived a flush interval pay this.
  if (reported) Flush();
}

size_t TaskEventBuffer::num_buffered() const {
  absl::MutexLock lock(&mu_);
  return events_.size();
}

void TaskEventBuffer::ToProto(const Buffered& event, rpc::TaskEvent* out) const {
  out->set_task_id(event.task_id.data(), TaskId::Size());
  out->set_attempt(event.attempt);
  out->set_job_id(event.job_id.data(), JobId::Size());
  out->set_state(event.state);
  out->set_time_us(absl::ToUnixMicros(event.time));
  out->set_submitted_time_us(MicrosOrZero(event.submitted_time));
  out->set_start_time_us(MicrosOrZero(event.start_time));
  if (!event.name.empty()) {
    const absl::string_view name = event.name.view();
    out->set_name(name.data(), name.size());
  }
  out->set_type(event.type);
  if (!event.actor_id.IsNil()) out->set_actor_id(event.actor_id.data(), ActorId::Size());
  if (event.executed_here) {
    out->set_node_id(options_.node_id.data(), NodeId::Size());
    out->set_worker_id(options_.worker_id.data(), WorkerId::Size());
    out->set_worker_pid(options_.pid);
  }
  out->set_error_message(event.error_message);
}

int TaskEventBuffer::Flush() {
  absl::MutexLock flush_lock(&flush_mu_);
  std::vector<Buffered> events;
  absl::flat_hash_map<JobId, int64_t> drops;
  {
    absl::MutexLock lock(&mu_);
    // Runs still going that were not reported yet: RUNNING now, so they show while they last.
    for (auto& [token, run] : running_) {
      if (run.reported) continue;
      run.reported = true;
      AppendLocked(run.event);
    }
    events.swap(events_);
    // About as many next time: one allocation instead of the vector regrowing on the task path.
    events_.reserve(std::min(events.size(), options_.max_buffered_events));
    drops.swap(unreported_drops_);
  }
  if (events.empty() && drops.empty()) return 0;
  int calls = 0;
  size_t next = 0;
  do {
    // On an arena: the batch's strings and messages are one allocation, freed at once.
    google::protobuf::Arena arena;
    auto* request = google::protobuf::Arena::CreateMessage<rpc::AddTaskEventDataRequest>(&arena);
    const size_t first = next;
    const size_t end = std::min(events.size(), next + options_.max_batch_events);
    request->mutable_events()->Reserve(static_cast<int>(end - next));
    for (; next < end; ++next) ToProto(events[next], request->add_events());
    if (calls == 0) {
      for (const auto& [job_id, count] : drops) {
        rpc::TaskEventDrops* out = request->add_dropped();
        out->set_job_id(job_id.data(), JobId::Size());
        out->set_count(count);
      }
    }
    ++calls;
    if (report_(*request).ok()) continue;
    // Lost: say so in the next report instead.
    absl::MutexLock lock(&mu_);
    for (size_t i = first; i < end; ++i) ++unreported_drops_[events[i].job_id];
    if (calls == 1) {
      for (const auto& [job_id, count] : drops) unreported_drops_[job_id] += count;
    }
    num_dropped_.fetch_add(static_cast<int64_t>(end - first), std::memory_order_relaxed);
  } while (next < events.size());
  return calls;
}

}  // namespace troupe
