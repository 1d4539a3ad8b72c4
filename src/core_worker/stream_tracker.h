// StreamTracker: the owner's side of streaming generators (troupe::StreamWriter). A streaming
// task reports each item it yields to its caller as it goes (ReportStreamItem); the caller reads
// them in order with Next() before the task ends. Items are the objects of ObjectId indices
// 2, 3, ... of the task; its return object (index 1) marks the end of the stream: nil, or the
// error the task ended with, which the reader gets after the items produced before it.
//
// Each item is held (one local reference) by the stream from its arrival until Next() hands it
// to the reader, or the stream is released (the reader let go of it): then the unread items are
// freed. Backpressure: with a bound B, the answer to item i's report is held until the reader
// has taken item i - B (so at most B items wait unread, and the producer waits in its next
// yield); Stop (cancel) and Release answer every held report with `stop`.
//
// Items are not rebuilt when lost (IsStreamItem lets the SubmissionFacade say so).
//
// Owned by CoreWorker; uses (does not own) the ObjectService. Thread-safe (one mutex): reports
// arrive on gRPC threads, Next() runs on API threads; held report answers run without the lock.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"
#include "src/common/ids.h"
#include "src/core_worker/object_service.h"

namespace troupe {

class StreamTracker {
 public:
  explicit StreamTracker(ObjectService* objects) : objects_(objects) {}
  ~StreamTracker() { StopAll(); }
  // Shutting down: every held report is answered with stop, and so is every later one.
  void StopAll() ABSL_LOCKS_EXCLUDED(mu_);

  // A streaming task was submitted (before it can report anything); `backpressure`: the most
  // unread items (0: no bound).
  void Register(const TaskId& task, int64_t backpressure) ABSL_LOCKS_EXCLUDED(mu_);
  // ReportStreamItem: stores the item (a repeat from a rerun only adds its copy), and answers
  // (`done`) at once or once the reader is within the bound. Unknown (released) streams:
  // answered with stop.
  void HandleReport(const rpc::ReportStreamItemRequest& request, rpc::ReportStreamItemReply* reply,
                    std::function<void(absl::Status)> done) ABSL_LOCKS_EXCLUDED(mu_);
  // The reader's next item (with one local reference held for it), waiting until it comes;
  // nullopt once the task ended and every item was read (the end object then says how it
  // ended); DeadlineExceeded at `deadline`; NotFound for a stream this process does not own.
  absl::StatusOr<std::optional<ObjectRefInfo>> Next(const TaskId& task, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Items produced and not read yet (arrived here), for tests and `Stream::NumReady`.
  int64_t NumUnread(const TaskId& task) const ABSL_LOCKS_EXCLUDED(mu_);
  // The reader cancelled the stream: held and later reports are answered with stop.
  void Stop(const TaskId& task) ABSL_LOCKS_EXCLUDED(mu_);
  // The stream's end object was freed (the reader let go of it): unread items are freed and
  // the producer told to stop.
  void Release(const TaskId& task) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `id` is an item of a stream this process owned.
  bool IsStreamItem(const ObjectId& id) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct HeldReport {
    int64_t index;
    rpc::ReportStreamItemReply* reply;
    std::function<void(absl::Status)> done;
  };
  struct Stream {
    int64_t backpressure = 0;
    int64_t reported = 0;  // items arrived: 1..reported
    int64_t read = 0;      // items handed to the reader: 1..read
    bool ended = false;
    bool stopped = false;
    uint64_t end_watch = 0;  // the memory store's OnReady handle for the end object
    std::vector<HeldReport> held;
  };
  // Answers (after the lock is released) the held reports the reader's progress lets go.
  std::vector<HeldReport> TakeReleasableLocked(Stream& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnEnded(const TaskId& task) ABSL_LOCKS_EXCLUDED(mu_);

  ObjectService* objects_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  absl::flat_hash_map<TaskId, Stream> streams_ ABSL_GUARDED_BY(mu_);
  // Every stream task this process submitted (16 bytes each), to explain a lost item.
  absl::flat_hash_set<TaskId> stream_tasks_ ABSL_GUARDED_BY(mu_);
  bool all_stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace troupe
