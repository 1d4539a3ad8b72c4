#include "src/core_worker/stream_tracker.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace troupe {
namespace {

// Item `index` (from 1) of stream task `task`: ObjectId index `index + 1` (1 is the end).
ObjectId ItemId(const TaskId& task, int64_t index) {
  return ObjectId::FromIndex(task, static_cast<uint32_t>(index + 1));
}

}  // namespace

void StreamTracker::StopAll() {
  std::vector<HeldReport> held;
  {
    absl::MutexLock lock(&mu_);
    all_stopped_ = true;
    for (auto& [task, stream] : streams_) {
      stream.stopped = true;
      for (auto& report : stream.held) held.push_back(std::move(report));
      stream.held.clear();
    }
  }
  for (auto& report : held) {
    report.reply->set_stop(true);
    report.done(absl::OkStatus());
  }
}

void StreamTracker::Register(const TaskId& task, int64_t backpressure) {
  {
    absl::MutexLock lock(&mu_);
    streams_[task].backpressure = backpressure;
    stream_tasks_.insert(task);
  }
  // The end object is stored however the task ends (its reply, a failure, the cluster gone).
  const uint64_t watch = objects_->memory_store().OnReady(
      ObjectId::FromIndex(task, 1), absl::InfiniteFuture(),
      [this, task](std::optional<StoredObject>) { OnEnded(task); });
  absl::MutexLock lock(&mu_);
  if (auto it = streams_.find(task); it != streams_.end() && !it->second.ended) {
    it->second.end_watch = watch;
  }
}

void StreamTracker::OnEnded(const TaskId& task) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(task);
  if (it == streams_.end()) return;
  it->second.ended = true;
  it->second.end_watch = 0;
  changed_.SignalAll();
}

std::vector<StreamTracker::HeldReport> StreamTracker::TakeReleasableLocked(Stream& stream) {
  std::vector<HeldReport> out;
  std::vector<HeldReport> still;
  for (auto& report : stream.held) {
    if (stream.stopped || stream.backpressure <= 0 ||
        report.index - stream.read <= stream.backpressure) {
      report.reply->set_stop(stream.stopped);
      out.push_back(std::move(report));
    } else {
      still.push_back(std::move(report));
    }
  }
  stream.held = std::move(still);
  return out;
}

void StreamTracker::HandleReport(const rpc::ReportStreamItemRequest& request,
                                 rpc::ReportStreamItemReply* reply,
                                 std::function<void(absl::Status)> done) {
  const TaskId task = *TaskId::FromBinary(request.task_id());
  const ObjectId id = ItemId(task, request.index());
  if (request.item().object_id() != id.Binary()) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("item ", request.index(), " of stream task ", task.Hex(), " must be object ",
                     id.Hex(), ", not another")));
  }
  bool fresh = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(task);
    if (it == streams_.end() || it->second.stopped || all_stopped_) {
      reply->set_stop(true);
      return done(absl::OkStatus());
    }
    Stream& stream = it->second;
    if (request.index() > stream.reported + 1) {
      return done(absl::FailedPreconditionError(
          absl::StrCat("item ", request.index(), " of stream task ", task.Hex(),
                       " came before item ", stream.reported + 1)));
    }
    if (request.index() == stream.reported + 1) {
      fresh = true;
      // Held by the stream until read (before it is stored: an untracked return is dropped).
      objects_->references().AddLocal({id, objects_->address()});
    }
  }
  // Store it (a repeat from a rerun keeps the live value and adds its copy).
  rpc::PushTaskReply as_reply;
  *as_reply.add_returns() = request.item();
  *as_reply.mutable_return_contained_refs() = request.contained_refs();
  as_reply.set_worker_address(request.worker_address());
  objects_->StoreReturns(as_reply, /*keep_live_copies=*/true);
  std::vector<HeldReport> answers;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(task);
    if (it == streams_.end()) {  // released meanwhile (Release freed what it held)
      reply->set_stop(true);
      return done(absl::OkStatus());
    }
    Stream& stream = it->second;
    if (fresh) stream.reported = request.index();
    stream.held.push_back({request.index(), reply, std::move(done)});
    answers = TakeReleasableLocked(stream);
    changed_.SignalAll();
  }
  for (auto& report : answers) report.done(absl::OkStatus());
}

absl::StatusOr<std::optional<ObjectRefInfo>> StreamTracker::Next(const TaskId& task,
                                                                 absl::Time deadline) {
  std::vector<HeldReport> answers;
  std::optional<ObjectRefInfo> item;
  {
    absl::MutexLock lock(&mu_);
    while (true) {
      auto it = streams_.find(task);
      if (it == streams_.end()) {
        return absl::NotFoundError(
            absl::StrCat("stream of task ", task.Hex(),
                         " is not known here: only the process that started a stream can read it"));
      }
      Stream& stream = it->second;
      if (stream.read < stream.reported) {
        // The stream's reference passes to the reader.
        item = ObjectRefInfo{ItemId(task, ++stream.read), objects_->address()};
        answers = TakeReleasableLocked(stream);
        break;
      }
      if (stream.ended) return std::optional<ObjectRefInfo>();
      if (changed_.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("no item of stream task ", task.Hex(), " came in time"));
      }
    }
  }
  for (auto& report : answers) report.done(absl::OkStatus());
  return item;
}

int64_t StreamTracker::NumUnread(const TaskId& task) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(task);
  return it == streams_.end() ? 0 : it->second.reported - it->second.read;
}

void StreamTracker::Stop(const TaskId& task) {
  std::vector<HeldReport> answers;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(task);
    if (it == streams_.end()) return;
    it->second.stopped = true;
    answers = TakeReleasableLocked(it->second);
  }
  for (auto& report : answers) report.done(absl::OkStatus());
}

void StreamTracker::Release(const TaskId& task) {
  std::vector<HeldReport> answers;
  std::vector<ObjectId> unread;
  uint64_t end_watch = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(task);
    if (it == streams_.end()) return;
    Stream& stream = it->second;
    stream.stopped = true;
    answers = TakeReleasableLocked(stream);
    for (int64_t i = stream.read + 1; i <= stream.reported; ++i) unread.push_back(ItemId(task, i));
    end_watch = stream.end_watch;
    streams_.erase(it);
    changed_.SignalAll();
  }
  if (end_watch != 0)
    objects_->memory_store().CancelOnReady(ObjectId::FromIndex(task, 1), end_watch);
  for (const ObjectId& id : unread) objects_->references().RemoveLocal(id);
  for (auto& report : answers) report.done(absl::OkStatus());
}

bool StreamTracker::IsStreamItem(const ObjectId& id) const {
  absl::MutexLock lock(&mu_);
  return id.Index() > 1 && stream_tasks_.contains(id.CreatingTaskId());
}

}  // namespace troupe
