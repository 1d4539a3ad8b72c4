// troupe::util::ActorPool: a fixed set of actors shared out to a stream of work, as Ray's
// ray.util.ActorPool: each actor runs one submitted call at a time; a submission waits (inside
// the pool, not blocking the caller) until an actor is free; results come back in submission
// order (GetNext) or as they finish (GetNextUnordered).
//
//   troupe::util::ActorPool<Doubler, int> pool({a, b});
//   auto twice = [](const troupe::ActorHandle<Doubler>& actor, int v) {
//     return actor.Task(&Doubler::Twice).Remote(v);
//   };
//   std::vector<int> out = pool.Map(twice, std::vector<int>{1, 2, 3, 4});  // {2, 4, 6, 8}
//
// `fn(actor, value)` submits one call and returns its ObjectRef<R>. The pool holds the handles;
// it does not create or kill actors. Errors: a call's error (TaskError, ActorDiedError, ...) is
// thrown by the GetNext that reaches it, and its actor is free again; GetNext throws
// GetTimeoutError after `timeout` (the result stays next); InvalidArgumentError for an empty
// pool, GetNext with nothing submitted, or Map while earlier results were not taken.
// Thread-compatible: use a pool from one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "troupe/api.h"

namespace troupe::util {

template <typename A, typename R>
class ActorPool {
  static_assert(!std::is_void_v<R>, "ActorPool: the calls must return a value");

 public:
  using Handle = ActorHandle<A>;

  explicit ActorPool(std::vector<Handle> actors) {
    if (actors.empty()) throw InvalidArgumentError("ActorPool needs at least one actor");
    for (auto& actor : actors) idle_.push_back(std::move(actor));
  }

  // Runs fn(actor, value) on a free actor now, or once one is free.
  template <typename F, typename V>
  void Submit(F&& fn, V value) {
    queued_.push_back({next_index_++, [fn = std::forward<F>(fn), value = std::move(value)](
                                          const Handle& actor) { return fn(actor, value); }});
    Dispatch();
  }

  // True while some submitted result has not been taken.
  bool HasNext() const { return !in_flight_.empty() || !queued_.empty(); }

  // The result of the earliest submission not yet taken (waiting for it up to `timeout`).
  R GetNext(std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
    RequireNext();
    return Take(in_flight_.begin(), timeout);
  }

  // The result of whichever submission finishes first.
  R GetNextUnordered(std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
    RequireNext();
    std::vector<ObjectRef<R>> refs;
    for (const auto& [index, call] : in_flight_) refs.push_back(call.ref);
    WaitResult<R> waited = Wait(refs, 1, timeout);
    if (waited.ready.empty()) {
      throw GetTimeoutError("ActorPool::GetNextUnordered: no call finished within the timeout");
    }
    for (auto it = in_flight_.begin(); it != in_flight_.end(); ++it) {
      if (it->second.ref == waited.ready.front()) return Take(it, std::nullopt);
    }
    throw TroupeError("ActorPool: a finished call is not in the pool");  // not reached
  }

  // fn over every value; the results in the values' order.
  template <typename F, typename V>
  std::vector<R> Map(F&& fn, const std::vector<V>& values) {
    RequireNothingPending("Map");
    for (const V& value : values) Submit(fn, value);
    std::vector<R> results;
    results.reserve(values.size());
    while (HasNext()) results.push_back(GetNext());
    return results;
  }

  // fn over every value; the results as they finish.
  template <typename F, typename V>
  std::vector<R> MapUnordered(F&& fn, const std::vector<V>& values) {
    RequireNothingPending("MapUnordered");
    for (const V& value : values) Submit(fn, value);
    std::vector<R> results;
    results.reserve(values.size());
    while (HasNext()) results.push_back(GetNextUnordered());
    return results;
  }

  // Whether an actor is idle (a Submit would start at once).
  bool HasFree() const { return !idle_.empty() && queued_.empty(); }
  // Takes an idle actor out of the pool (nullopt if none is idle).
  std::optional<Handle> PopIdle() {
    if (!HasFree()) return std::nullopt;
    Handle actor = std::move(idle_.front());
    idle_.pop_front();
    return actor;
  }
  // Adds an actor to the pool (it may start a waiting submission at once).
  void Push(Handle actor) {
    idle_.push_back(std::move(actor));
    Dispatch();
  }

 private:
  struct Call {
    ObjectRef<R> ref;
    Handle actor;
  };
  struct Queued {
    uint64_t index;
    std::function<ObjectRef<R>(const Handle&)> submit;
  };
  using InFlight = std::map<uint64_t, Call>;

  void Dispatch() {
    while (!idle_.empty() && !queued_.empty()) {
      Queued next = std::move(queued_.front());
      queued_.pop_front();
      Handle actor = std::move(idle_.front());
      idle_.pop_front();
      ObjectRef<R> ref = next.submit(actor);
      in_flight_.emplace(next.index, Call{std::move(ref), std::move(actor)});
    }
  }

  // Waits for `it`'s result; its actor is free again whether the call succeeded or threw (not
  // after a timeout: the call is still running).
  R Take(typename InFlight::iterator it, std::optional<std::chrono::milliseconds> timeout) {
    std::shared_ptr<R> value;
    try {
      value = troupe::Get(it->second.ref, timeout);
    } catch (const GetTimeoutError&) {
      throw;
    } catch (...) {
      Release(it);
      throw;
    }
    Release(it);
    return std::move(*value);
  }

  void Release(typename InFlight::iterator it) {
    idle_.push_back(std::move(it->second.actor));
    in_flight_.erase(it);
    Dispatch();
  }

  void RequireNext() const {
    if (!HasNext()) throw InvalidArgumentError("ActorPool: nothing submitted is left to get");
  }
  void RequireNothingPending(const char* what) const {
    if (HasNext()) {
      throw InvalidArgumentError(std::string("ActorPool::") + what +
                                 ": earlier submissions have results not taken yet; GetNext "
                                 "them first");
    }
  }

  std::deque<Handle> idle_;
  std::deque<Queued> queued_;  // submissions waiting for a free actor, oldest first
  InFlight in_flight_;         // by submission index
  uint64_t next_index_ = 0;
};

}  // namespace troupe::util
