// troupe::util::Queue<T>: a FIFO queue shared across the cluster, as Ray's ray.util.queue.Queue,
// kept by an actor that Queue creates (on any node; it holds no resources). Put and Get block
// (while full or empty) up to a timeout, or not at all (PutNowait, GetNowait). A Queue passed to
// tasks or actors (it is serializable) names the same queue there.
//
//   troupe::util::Queue<int> queue(/*maxsize=*/100);       // Queue<int>(0): unbounded
//   queue.Put(7);                                       // blocks while 100 items wait
//   troupe::Task(Consume).Remote(queue);                // Consume(troupe::util::Queue<int> q)
//   int item = queue.Get(std::chrono::seconds(5));      // QueueEmptyError after 5 s
//
// Items are copied in (msgpack, like task arguments) and must not hold ObjectRefs (the queue does
// not keep what they point to alive). Blocking is done in slices: a blocked Put or Get waits at
// most 200 ms inside the actor per call and calls again until its timeout, so blocked callers
// never hold the actor's call threads for long. The queue lives until Shutdown() (or the job's
// end); copies of a Queue share it.
// Errors: QueueFullError / QueueEmptyError (TroupeError) when the timeout passes or a Nowait call
// cannot proceed; the actor's failures (ActorDiedError) as they come.
// Thread-safety: a Queue object may be used from many threads at once (each call is one or more
// actor calls); the actor runs up to 32 calls at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "troupe/api.h"

namespace troupe::util {

class QueueFullError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};
class QueueEmptyError : public TroupeError {
 public:
  using TroupeError::TroupeError;
};

namespace internal {

// The actor behind a Queue: serialized items, at most `maxsize` (<= 0: unbounded).
class QueueActor {
 public:
  static constexpr int64_t kMaxWaitMs = 200;

  explicit QueueActor(int64_t maxsize) : maxsize_(maxsize) {}
  static QueueActor* Create(int64_t maxsize) { return new QueueActor(maxsize); }

  // Stores `item` once there is room, waiting up to `wait_ms` (capped at kMaxWaitMs): true if
  // stored.
  bool Put(std::string item, int64_t wait_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!changed_.wait_for(lock, Slice(wait_ms), [&] { return !FullLocked(); })) return false;
    items_.push_back(std::move(item));
    changed_.notify_all();
    return true;
  }
  // The oldest item, waiting up to `wait_ms` (capped) for one: empty if none came.
  std::vector<std::string> Get(int64_t wait_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!changed_.wait_for(lock, Slice(wait_ms), [&] { return !items_.empty(); })) return {};
    std::vector<std::string> out{std::move(items_.front())};
    items_.pop_front();
    changed_.notify_all();
    return out;
  }
  int64_t Size() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(items_.size());
  }

 private:
  static std::chrono::milliseconds Slice(int64_t wait_ms) {
    return std::chrono::milliseconds(std::max<int64_t>(0, std::min(wait_ms, kMaxWaitMs)));
  }
  bool FullLocked() const {
    return maxsize_ > 0 && static_cast<int64_t>(items_.size()) >= maxsize_;
  }

  const int64_t maxsize_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::string> items_;  // guarded by mu_
};

// Registered once per program (an inline variable: one across every file that includes this).
inline const bool kQueueActorRegistered = ::troupe::internal::RegisterRemote(
    "troupe::util::internal::QueueActor::Create, &troupe::util::internal::QueueActor::Put, "
    "&troupe::util::internal::QueueActor::Get, &troupe::util::internal::QueueActor::Size",
    &QueueActor::Create, &QueueActor::Put, &QueueActor::Get, &QueueActor::Size);

}  // namespace internal

template <typename T>
class Queue {
 public:
  using Timeout = std::optional<std::chrono::milliseconds>;

  // A new queue holding at most `maxsize` items (0 or less: unbounded). Needs Init.
  explicit Queue(int64_t maxsize)
      : maxsize_(maxsize),
        actor_(Actor(internal::QueueActor::Create).SetMaxConcurrency(32).Remote(maxsize)) {}
  // No queue (what a Queue passed to a task is read into): every call throws
  // InvalidArgumentError until one is assigned.
  Queue() = default;

  // Adds `item`, waiting while the queue is full: forever, or up to `timeout` (then
  // QueueFullError).
  void Put(const T& item, Timeout timeout = std::nullopt) {
    RequireQueue();
    const std::string bytes = ::troupe::internal::Serialize(item).ToString();
    const auto deadline = DeadlineOf(timeout);
    while (true) {
      const int64_t wait_ms = RemainingMs(deadline);
      if (*troupe::Get(actor_.Task(&internal::QueueActor::Put).Remote(bytes, wait_ms))) return;
      if (Expired(deadline)) {
        throw QueueFullError("Queue::Put: the queue stayed full (" + std::to_string(maxsize_) +
                             " items) past the timeout");
      }
    }
  }
  // Adds `item` now, or throws QueueFullError.
  void PutNowait(const T& item) { Put(item, std::chrono::milliseconds(0)); }

  // Takes the oldest item, waiting while the queue is empty: forever, or up to `timeout` (then
  // QueueEmptyError).
  T Get(Timeout timeout = std::nullopt) {
    RequireQueue();
    const auto deadline = DeadlineOf(timeout);
    while (true) {
      const int64_t wait_ms = RemainingMs(deadline);
      auto got = troupe::Get(actor_.Task(&internal::QueueActor::Get).Remote(wait_ms));
      if (!got->empty()) {
        const std::string& bytes = got->front();
        return std::move(*::troupe::internal::DecodeObject<T>(
            ::troupe::internal::Buffer{bytes.data(), bytes.size(), got}));
      }
      if (Expired(deadline)) {
        throw QueueEmptyError("Queue::Get: the queue stayed empty past the timeout");
      }
    }
  }
  // Takes the oldest item now, or throws QueueEmptyError.
  T GetNowait() { return Get(std::chrono::milliseconds(0)); }

  // Items waiting now (a snapshot: others may Put or Get meanwhile).
  int64_t Size() const {
    RequireQueue();
    return *troupe::Get(actor_.Task(&internal::QueueActor::Size).Remote());
  }
  bool Empty() const { return Size() == 0; }
  bool Full() const { return maxsize_ > 0 && Size() >= maxsize_; }
  int64_t maxsize() const { return maxsize_; }
  // Ends the queue's actor: every copy of this Queue fails from then on (ActorDiedError).
  void Shutdown() {
    RequireQueue();
    actor_.Kill();
  }
  const ActorHandle<internal::QueueActor>& actor() const { return actor_; }

  MSGPACK_DEFINE(maxsize_, actor_);

 private:
  using Clock = std::chrono::steady_clock;
  void RequireQueue() const {
    if (actor_.IsNil()) {
      throw InvalidArgumentError(
          "this Queue is empty (default-constructed): make one with Queue<T>(maxsize)");
    }
  }
  static std::optional<Clock::time_point> DeadlineOf(Timeout timeout) {
    if (!timeout) return std::nullopt;
    return Clock::now() + *timeout;
  }
  static int64_t RemainingMs(const std::optional<Clock::time_point>& deadline) {
    if (!deadline) return internal::QueueActor::kMaxWaitMs;
    return std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count());
  }
  static bool Expired(const std::optional<Clock::time_point>& deadline) {
    return deadline && Clock::now() >= *deadline;
  }

  int64_t maxsize_ = 0;
  ActorHandle<internal::QueueActor> actor_;
};

}  // namespace troupe::util
