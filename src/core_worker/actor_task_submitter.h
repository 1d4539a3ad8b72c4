// Sends actor calls straight to the actor's worker, in order. Each call from this process to an
// actor gets the next sequence number; the actor's worker runs them in that order (it is told
// the first unanswered number, so a restarted actor knows where this caller's order begins).
// The actor's address comes from the ActorDirectory (the GCS); when a push fails the actor is
// looked up again: once it is ALIVE at a new address, calls not sent yet go there, and calls that
// were in flight are resent if max_task_retries allows (at-least-once) or fail with the death cause
// (at-most-once); when it is DEAD every waiting call fails with the cause. Pushes go through a
// TaskPushClient, lookups through an ActorDirectory, time comes from a Clock (all three not owned;
// peer_clients.h, clock.h), so tests drive it with fakes. Thread-safe. Tick() runs on the core
// worker's timer thread; callbacks run without the lock.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"
#include "src/common/clock.h"
#include "src/common/ids.h"
#include "src/core_worker/memory_store.h"
#include "src/core_worker/task_counters.h"
#include "src/rpc/peer_clients.h"

namespace troupe {

class ActorTaskSubmitter {
 public:
  struct Callbacks {
    std::function<void(const rpc::TaskSpec&, rpc::PushTaskReply)> on_reply;
    std::function<void(const rpc::TaskSpec&, StoredObject::Error, const std::string&)> on_failure;
  };

  // How long a worker the directory reports ALIVE may stay unreachable before its calls fail.
  static constexpr absl::Duration kUnreachableLimit = absl::Seconds(30);

  // `directory`, `pushes` and `clock` are not owned and must outlive the submitter.
  ActorTaskSubmitter(ActorDirectory* directory, TaskPushClient* pushes, const Clock* clock,
                     std::string caller_worker_id, Callbacks callbacks);

  // Calls made so far (submitted, finished, failed; `retried` unused), for cluster metrics.
  const TaskCounters& counters() const { return counters_; }

  void Submit(const ActorId& actor_id, rpc::TaskSpec spec);
  // Looks up actors whose address is unknown or stale, and resends or fails their calls.
  void Tick();
  void Shutdown();

 private:
  struct Call {
    rpc::TaskSpec spec;
    bool sent = false;
    int attempts = 0;
  };
  struct ActorState {
    std::string address;  // of the live worker; "" while unknown
    bool resolving = true;
    absl::Time next_lookup = absl::InfinitePast();
    absl::Time unreachable_since = absl::InfiniteFuture();  // pushes failing at `address`
    bool dead = false;
    std::string death_cause;
    int64_t max_task_retries = 0;
    int64_t next_seq = 0;
    std::map<int64_t, Call> unanswered;  // by sequence number
  };
  // Sends the call with this sequence number (it must be unanswered).
  void PushLocked(const ActorId& actor_id, ActorState& actor, int64_t seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnReply(const ActorId& actor_id, int64_t seq, const std::string& address,
               absl::StatusOr<rpc::PushTaskReply> reply);
  void Apply(const ActorId& actor_id, const rpc::ActorInfo& info);

  // Counts, then passes on.
  void Reply(const rpc::TaskSpec& spec, rpc::PushTaskReply reply);
  void Fail(const rpc::TaskSpec& spec, StoredObject::Error error, const std::string& message);

  ActorDirectory* directory_;
  TaskPushClient* pushes_;
  const Clock* clock_;
  const std::string caller_worker_id_;
  Callbacks callbacks_;
  TaskCounters counters_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<ActorId, ActorState> actors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
