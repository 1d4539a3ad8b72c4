// What a core worker knows about objects' values: for objects it owns, their value once the
// creating task finished (inline bytes, or where in the cluster's object stores it lives) or the
// error that replaced it; for objects it borrows, a cache of what their owner said. Readers can
// block (Wait) or register a callback (OnReady); callbacks with a deadline are expired by
// ExpireWaiters, which the core worker's timer calls while HasTimedWaiters().
// Thread-safe. Callbacks run on the thread that made the object ready or expired them, without
// the store's lock held.
#pragma once

#include <functional>
#include <list>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "src/common/ids.h"

namespace troupe {

struct StoredObject {
  // Same order as rpc::GetObjectStatusReply::ErrorKind (borrowers receive it as a number).
  enum class Error {
    kNone,
    kApplication,
    kTaskFailed,
    kLost,  // every copy is gone and it has no lineage (made by Put)
    kCancelled,
    kActorDied,
    kOwnerDied,             // borrowed, and its owner is gone
    kReconstructionFailed,  // every copy is gone and running its task again failed or may not
    kClusterUnreachable,    // the driver lost its cluster (cluster_liveness.h)
    kOutOfMemory,           // the memory monitor killed its worker, and no retries are left
  };
  Error error = Error::kNone;
  std::string error_message;  // for system errors
  // The value: inline_value, or in_plasma with node_id/raylet_address/size; for kApplication the
  // exception's type, message, function, node and pid.
  rpc::ReturnObject value;
  std::vector<std::string> copy_raylet_addresses;  // nodes holding copies, primary first
};

class MemoryStore {
 public:
  using ReadyCallback = std::function<void(std::optional<StoredObject>)>;

  // Records the object's value (or error) and wakes everyone waiting for it.
  void Put(const ObjectId& id, StoredObject object);
  std::optional<StoredObject> GetIfReady(const ObjectId& id) const;
  bool IsReady(const ObjectId& id) const;
  // Blocks until ready; nullopt if `deadline` passes first.
  std::optional<StoredObject> Wait(const ObjectId& id, absl::Time deadline);
  // Blocks until `num_ready` of `ids` are ready or the deadline passes; returns readiness.
  std::vector<bool> WaitMany(const std::vector<ObjectId>& ids, size_t num_ready,
                             absl::Time deadline);
  // Runs `done` once the object is ready (maybe at once, on this thread), or with nullopt at
  // `deadline`. Returns a handle for CancelOnReady (0 when `done` already ran).
  uint64_t OnReady(const ObjectId& id, absl::Time deadline, ReadyCallback done);
  // Drops a callback registered by OnReady that has not run yet (no-op once it ran).
  void CancelOnReady(const ObjectId& id, uint64_t handle);
  // Runs (with nullopt) every callback whose deadline is `now` or earlier. Scans the waiters
  // only once the earliest deadline is due.
  void ExpireWaiters(absl::Time now);
  // Whether a callback registered by OnReady has a deadline (ExpireWaiters has work, now or
  // later).
  bool HasTimedWaiters() const;
  // Called, without the store's lock, when OnReady registers a callback with a deadline
  // (optional; wakes the core worker's sleeping timer). Set before the store is shared.
  void SetTimedWaiterListener(std::function<void()> listener) {
    timed_waiter_listener_ = std::move(listener);
  }
  void AddCopy(const ObjectId& id, const std::string& raylet_address);
  void Erase(const ObjectId& id);
  size_t size() const;

 private:
  struct Waiter {
    uint64_t handle;
    absl::Time deadline;
    ReadyCallback done;
    bool timed() const { return deadline != absl::InfiniteFuture(); }  // counted in timed_waiters_
  };
  mutable absl::Mutex mu_;
  absl::CondVar ready_;
  absl::flat_hash_map<ObjectId, StoredObject> objects_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ObjectId, std::list<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  // Waiters in waiters_ whose deadline is not InfiniteFuture.
  size_t timed_waiters_ ABSL_GUARDED_BY(mu_) = 0;
  // No waiter's deadline is earlier (a lower bound: a waiter that left meanwhile may have set
  // it), so ExpireWaiters scans the waiters only once one may be due, not on every tick.
  absl::Time next_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::function<void()> timed_waiter_listener_;
};

}  // namespace troupe
