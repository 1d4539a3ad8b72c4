// Sends actor calls straight to the actor's worker, in order. Each call from this process to an
// actor gets the next sequence number; the actor's worker runs them in that order, runs each at
// most once per incarnation and answers a resent call with the first delivery's reply
// (task_executor.h). Every push carries the first unanswered number: it acknowledges the replies
// below it (the actor drops them) and tells a restarted actor where this caller's order begins.
// The actor's address comes from the ActorDirectory (the GCS): an actor not ALIVE yet is looked
// up again after a tenth of the time it has waited (20 ms to 500 ms), all those due in one
// directory call. When a push fails:
//   - a transport error (UNAVAILABLE, DEADLINE_EXCEEDED, ...: it may or may not have run) makes
//     the submitter ask the GCS. Still ALIVE at the same worker (same incarnation): the failed
//     calls are resent there — safe, the actor deduplicates — until one answers; only a worker
//     that no push has reached for kUnreachableLimit fails its calls. ALIVE at a new worker (a
//     restart): calls not sent yet go there, and calls that were sent are resent if
//     max_task_retries allows (at-least-once across incarnations) or fail with the death cause
//     (at-most-once). DEAD: every waiting call fails with the cause.
//   - any other error (the actor refused the request: INVALID_ARGUMENT, UNAUTHENTICATED, ...)
//     fails that call at once with the actor's message.
// A node declared dead (OnNodeDead, from the GCS's node channel) ends the incarnations on it at
// once, without waiting for a transport error (a partitioned node answers nothing, for minutes):
// the calls in flight there are cancelled, their replies refused from then on (fencing), and the
// actor is looked up again; an ALIVE answer that still names a worker on that node is stale (the
// GCS has not finished reacting) and is asked again, so the calls go to the restarted actor
// (per max_task_retries) or fail with the actor's death cause.
// Pushes to an actor that runs one call at a time (max_concurrency 1, the default) are batched:
// at most kSerialPushWindow pushes (RPCs) are in flight to its worker; calls made meanwhile wait
// in this process and leave together, as one PushTasks stream (up to kMaxCallsPerPush; a lone
// call goes as a unary PushTask), when a push finishes. Holding a call back cannot deadlock: the
// actor would not start it before every earlier call of this caller had finished anyway, and the
// push it waits for ends when those have. Calls to an actor that runs several at once
// (max_concurrency > 1) are pushed at once, each on its own, as one of them may wait for a later
// one. After a lookup every waiting call is pushed at once, past the window: a resent call may be
// what the pushes in flight wait for. Every per-call rule above holds for a call in a batch as
// for a call pushed alone.
// Pushes go through a TaskPushClient, lookups through an ActorDirectory, time comes from a Clock
// (all three not owned; peer_clients.h, clock.h), so tests drive it with fakes. Thread-safe.
// Tick() runs on the core worker's timer thread; callbacks run without the lock. No periodic
// action is needed to send held calls: a finishing push sends them.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
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
    // Called (with the submitter's lock held: it must not call back) when an actor starts being
    // looked up, so Tick() is needed again (optional; wakes the core worker's sleeping timer).
    std::function<void()> wake_timer;
  };

  // How long a worker the directory reports ALIVE may fail every push before its calls fail.
  static constexpr absl::Duration kUnreachableLimit = absl::Seconds(30);
  // Between resends to a worker whose pushes keep failing.
  static constexpr absl::Duration kResendDelay = absl::Milliseconds(50);
  // Between lookups of an actor that is not ALIVE yet (pending creation, restarting, unknown):
  // a tenth of the time it has been looked up for, within these bounds.
  static constexpr absl::Duration kMinLookupInterval = absl::Milliseconds(20);
  static constexpr absl::Duration kMaxLookupInterval = absl::Milliseconds(500);
  // Actors looked up in one directory call.
  static constexpr size_t kLookupBatch = 1000;
  // Pushes in flight to an actor that runs one call at a time; more calls wait for one to end.
  static constexpr int kSerialPushWindow = 2;
  // The most calls one push carries (a larger backlog leaves in several).
  static constexpr int kMaxCallsPerPush = 256;

  // `directory`, `pushes` and `clock` are not owned and must outlive the submitter.
  ActorTaskSubmitter(ActorDirectory* directory, TaskPushClient* pushes, const Clock* clock,
                     std::string caller_worker_id, Callbacks callbacks);

  // Calls made so far (submitted, finished, failed; `retried` unused), for cluster metrics.
  const TaskCounters& counters() const { return counters_; }

  void Submit(const ActorId& actor_id, rpc::TaskSpec spec);
  // What Cancel did with an actor call.
  enum class CancelOutcome {
    kNotFound,   // not a call waiting for its answer here (finished, or never made): nothing
    kDropped,    // not sent yet: failed as cancelled now; the actor skips it (spec.cancelled)
    kSignalled,  // sent: the actor's worker was told (CancelTask, with `recursive`); its answer
                 // (skipped in its queue, or run with IsCancelled true) fails it as cancelled
    kKillActor,  // sent and `force`: the caller must kill the actor (restart rules apply); the
                 // call then fails as cancelled, and is never resent to a restarted actor
  };
  // Cancels the call that runs task `task_id`; `*actor_id` is set to its actor when found.
  CancelOutcome Cancel(const TaskId& task_id, bool force, bool recursive, ActorId* actor_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The GCS declared node `node_id` dead: see the header comment. Idempotent.
  void OnNodeDead(const NodeId& node_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Looks up actors whose address is unknown or stale, and resends or fails their calls.
  void Tick();
  // Whether Tick() has anything to do, now or later: an actor being looked up. While it is
  // false nothing changes with time alone; what makes it true calls `wake_timer`.
  bool NeedsTick() const ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown();

 private:
  struct Call {
    rpc::TaskSpec spec;
    bool sent = false;         // pushed at least once
    bool in_flight = false;    // its latest push has not been answered
    int attempts = 0;          // incarnations it was pushed to
    int64_t incarnation = -1;  // the latest of them
    int64_t push_id = 0;       // of its latest push: failures of older pushes are ignored
    CallCanceller cancel;      // of its latest push
    bool cancel_reported = false;  // failed as cancelled already; its answer is ignored
    bool force_cancelled = false;  // Cancel with force: fails as cancelled, never resent
  };
  // A call that ends without an answer fails with `error` and `message`, or as cancelled if
  // Cancel with force hit it; nothing if it was reported cancelled already.
  static void AddFailure(
      Call& call, StoredObject::Error error, const std::string& message,
      std::vector<std::tuple<rpc::TaskSpec, StoredObject::Error, std::string>>* failures);
  struct ActorState {
    // The live worker: its address ("" while unknown) and worker ID. A new one is a new
    // incarnation (a restart), counted in `incarnation`.
    std::string address;
    std::string worker_id;
    std::string node_id;  // binary: where the live worker runs
    int64_t incarnation = 0;
    // The incarnation whose node was declared dead (its replies are refused); -1 if none.
    int64_t fenced_incarnation = -1;
    bool resolving = true;
    absl::Time resolving_since = absl::InfinitePast();  // set by StartResolvingLocked
    absl::Time next_lookup = absl::InfinitePast();
    absl::Time unreachable_since = absl::InfiniteFuture();  // every push failing since
    bool dead = false;
    std::string death_cause;
    int64_t max_task_retries = 0;
    bool serial = true;        // runs one call at a time: its pushes are windowed and batched
    int pushes_in_flight = 0;  // to the current incarnation
    int64_t next_seq = 0;
    std::map<int64_t, Call> unanswered;  // by sequence number
    std::set<int64_t> to_push;           // unanswered calls waiting to be pushed, in order
  };
  // One push (RPC) of one or more calls: what each of its outcomes belongs to.
  struct Push {
    ActorId actor_id;
    int64_t incarnation = 0;
    std::vector<std::pair<int64_t, int64_t>> calls;  // (sequence number, push ID) by index
    size_t unanswered = 0;  // outcomes still to come (the callbacks never run concurrently)
  };
  // Pushes the calls in `to_push` to the current worker as far as the window allows, or all of
  // them `past_window` (after a lookup: resent calls may be what the pushes in flight wait for).
  void FlushLocked(const ActorId& actor_id, ActorState& actor, bool past_window = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends these unanswered calls (in order) to the current worker in one push.
  void SendLocked(const ActorId& actor_id, ActorState& actor, const std::vector<int64_t>& seqs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnResults(const std::shared_ptr<Push>& push, TaskPushClient::PushResults results)
      ABSL_LOCKS_EXCLUDED(mu_);
  // One call's outcome; fills `answered` (with the refusal message, if refused) when it ends
  // the call.
  void OnReplyLocked(const ActorId& actor_id, ActorState& actor, int64_t seq, int64_t push_id,
                     int64_t incarnation, absl::StatusOr<rpc::PushTaskReply>& reply,
                     std::optional<rpc::TaskSpec>* answered, std::optional<std::string>* refused)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Apply(const ActorId& actor_id, const rpc::ActorInfo& info);
  // `actor` is to be looked up (again) from its next_lookup on.
  void StartResolvingLocked(ActorState& actor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration LookupInterval(const ActorState& actor) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Counts, then passes on.
  void Reply(const rpc::TaskSpec& spec, rpc::PushTaskReply reply);
  void Fail(const rpc::TaskSpec& spec, StoredObject::Error error, const std::string& message);

  ActorDirectory* directory_;
  TaskPushClient* pushes_;
  const Clock* clock_;
  const std::string caller_worker_id_;
  Callbacks callbacks_;
  TaskCounters counters_;
  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // pushes (RPCs) not finished
  int64_t next_push_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<ActorId, ActorState> actors_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> dead_nodes_ ABSL_GUARDED_BY(mu_);  // binary IDs
};

}  // namespace troupe
