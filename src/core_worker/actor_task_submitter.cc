#include "src/core_worker/actor_task_submitter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"

namespace troupe {
namespace {

// Errors after which a push may or may not have reached the actor, and a resend may succeed.
// Anything else is the actor's worker refusing the call.
bool IsTransportError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
      return true;
    default:
      return false;
  }
}

}  // namespace

ActorTaskSubmitter::ActorTaskSubmitter(ActorDirectory* directory, TaskPushClient* pushes,
                                       const Clock* clock, std::string caller_worker_id,
                                       Callbacks callbacks)
    : directory_(directory),
      pushes_(pushes),
      clock_(clock),
      caller_worker_id_(std::move(caller_worker_id)),
      callbacks_(std::move(callbacks)) {}

void ActorTaskSubmitter::Reply(const rpc::TaskSpec& spec, rpc::PushTaskReply reply) {
  bool threw = false;
  for (const auto& ret : reply.returns()) threw |= ret.is_application_error();
  ++(threw ? counters_.failed : counters_.finished);
  callbacks_.on_reply(spec, std::move(reply));
}

void ActorTaskSubmitter::Fail(const rpc::TaskSpec& spec, StoredObject::Error error,
                              const std::string& message) {
  ++counters_.failed;
  callbacks_.on_failure(spec, error, message);
}

void ActorTaskSubmitter::Submit(const ActorId& actor_id, rpc::TaskSpec spec) {
  ++counters_.submitted;
  std::optional<std::string> dead_cause;
  {
    absl::MutexLock lock(&mu_);
    auto [entry, added] = actors_.try_emplace(actor_id);
    ActorState& actor = entry->second;
    if (added) StartResolvingLocked(actor);  // where it lives is not known yet
    if (actor.dead) {
      dead_cause = actor.death_cause;
    } else {
      const int64_t seq = actor.next_seq++;
      spec.set_sequence_number(seq);
      spec.set_caller_worker_id(caller_worker_id_);
      actor.unanswered[seq].spec = std::move(spec);
      actor.to_push.insert(actor.to_push.end(), seq);
      FlushLocked(actor_id, actor);
      return;
    }
  }
  Fail(spec, StoredObject::Error::kActorDied, absl::StrCat("the actor is dead: ", *dead_cause));
}

void ActorTaskSubmitter::AddFailure(
    Call& call, StoredObject::Error error, const std::string& message,
    std::vector<std::tuple<rpc::TaskSpec, StoredObject::Error, std::string>>* failures) {
  if (call.cancel_reported) return;
  if (call.force_cancelled) {
    failures->emplace_back(std::move(call.spec), StoredObject::Error::kCancelled,
                           absl::StrCat("actor call ", call.spec.function_name(),
                                        " was cancelled with force (its actor was killed)"));
    return;
  }
  failures->emplace_back(std::move(call.spec), error, message);
}

ActorTaskSubmitter::CancelOutcome ActorTaskSubmitter::Cancel(const TaskId& task_id, bool force,
                                                             bool recursive, ActorId* actor_id) {
  std::optional<rpc::TaskSpec> dropped;
  std::string tell_address;
  {
    absl::MutexLock lock(&mu_);
    const std::string id = task_id.Binary();
    for (auto& [candidate, actor] : actors_) {
      for (auto& [seq, call] : actor.unanswered) {
        if (call.spec.task_id() != id) continue;
        *actor_id = candidate;
        if (call.cancel_reported || call.force_cancelled) return CancelOutcome::kNotFound;
        if (!call.sent) {
          // It keeps its place in this caller's order (the actor would wait for it forever
          // otherwise), marked so the actor answers it without running it.
          call.spec.set_cancelled(true);
          call.cancel_reported = true;
          dropped = call.spec;
          break;
        }
        if (force) {
          call.force_cancelled = true;
          return CancelOutcome::kKillActor;
        }
        tell_address = actor.address;
        break;
      }
      if (dropped || !tell_address.empty()) break;
    }
  }
  if (dropped) {
    Fail(*dropped, StoredObject::Error::kCancelled,
         absl::StrCat("actor call ", dropped->function_name(), " was cancelled"));
    return CancelOutcome::kDropped;
  }
  if (tell_address.empty()) return CancelOutcome::kNotFound;
  pushes_->CancelTask(tell_address, task_id.Binary(), recursive);
  return CancelOutcome::kSignalled;
}

void ActorTaskSubmitter::FlushLocked(const ActorId& actor_id, ActorState& actor,
                                     bool past_window) {
  if (shut_down_ || actor.resolving || actor.dead) return;
  while (!actor.to_push.empty() &&
         (past_window || !actor.serial || actor.pushes_in_flight < kSerialPushWindow)) {
    std::vector<int64_t> seqs;
    auto it = actor.to_push.begin();
    // An actor running several calls at once gets each call on its own: one may wait for a
    // later one, which must not wait behind it.
    const size_t limit = actor.serial ? kMaxCallsPerPush : 1;
    for (; it != actor.to_push.end() && seqs.size() < limit; ++it) seqs.push_back(*it);
    actor.to_push.erase(actor.to_push.begin(), it);
    SendLocked(actor_id, actor, seqs);
  }
}

void ActorTaskSubmitter::SendLocked(const ActorId& actor_id, ActorState& actor,
                                    const std::vector<int64_t>& seqs) {
  auto push = std::make_shared<Push>();
  push->actor_id = actor_id;
  push->incarnation = actor.incarnation;
  push->unanswered = seqs.size();
  const int64_t first_unanswered = actor.unanswered.begin()->first;
  rpc::PushTasksRequest batch;
  for (int64_t seq : seqs) {
    Call& call = actor.unanswered.at(seq);
    call.sent = true;
    call.in_flight = true;
    if (call.incarnation != actor.incarnation) {
      call.incarnation = actor.incarnation;
      call.attempts++;
    }
    call.push_id = next_push_id_++;
    push->calls.emplace_back(seq, call.push_id);
    rpc::TaskSpec* task = batch.add_pushes()->mutable_task();
    *task = call.spec;
    task->set_caller_first_unanswered(first_unanswered);
  }
  in_flight_++;
  actor.pushes_in_flight++;
  auto on_results = [this, push](TaskPushClient::PushResults results) {
    OnResults(push, std::move(results));
  };
  CallCanceller cancel;
  if (seqs.size() == 1) {
    // A lone call goes as a plain unary call: cheaper than a stream for a synchronous caller.
    cancel = pushes_->PushTask(actor.address, std::move(*batch.mutable_pushes(0)),
                               [on_results](absl::StatusOr<rpc::PushTaskReply> reply) {
                                 TaskPushClient::PushResults results;
                                 results.emplace_back(0, std::move(reply));
                                 on_results(std::move(results));
                               });
  } else {
    cancel = pushes_->PushTasks(actor.address, std::move(batch), std::move(on_results));
  }
  for (int64_t seq : seqs) actor.unanswered.at(seq).cancel = cancel;
}

void ActorTaskSubmitter::OnResults(const std::shared_ptr<Push>& push,
                                   TaskPushClient::PushResults results) {
  std::vector<std::pair<rpc::TaskSpec, absl::StatusOr<rpc::PushTaskReply>>> answered;
  std::vector<std::pair<rpc::TaskSpec, std::string>> refused;
  {
    absl::MutexLock lock(&mu_);
    push->unanswered -= results.size();
    const bool last = push->unanswered == 0;
    if (last) in_flight_--;
    if (shut_down_) return;
    ActorState& actor = actors_[push->actor_id];
    for (auto& [index, reply] : results) {
      const auto [seq, push_id] = push->calls.at(index);
      std::optional<rpc::TaskSpec> spec;
      std::optional<std::string> refusal;
      OnReplyLocked(push->actor_id, actor, seq, push_id, push->incarnation, reply, &spec,
                    &refusal);
      if (!spec) continue;
      if (refusal) {
        refused.emplace_back(std::move(*spec), std::move(*refusal));
      } else {
        answered.emplace_back(std::move(*spec), std::move(reply));
      }
    }
    if (last && push->incarnation == actor.incarnation) {
      actor.pushes_in_flight--;
      FlushLocked(push->actor_id, actor);  // the calls held back meanwhile
    }
  }
  for (auto& [spec, message] : refused) Fail(spec, StoredObject::Error::kTaskFailed, message);
  for (auto& [spec, reply] : answered) {
    if (reply->cancelled()) {  // Cancel reached the actor's worker
      Fail(spec, StoredObject::Error::kCancelled,
           absl::StrCat("actor call ", spec.function_name(), " was cancelled"));
    } else {
      Reply(spec, std::move(*reply));
    }
  }
}

void ActorTaskSubmitter::OnReplyLocked(const ActorId& actor_id, ActorState& actor, int64_t seq,
                                       int64_t push_id, int64_t incarnation,
                                       absl::StatusOr<rpc::PushTaskReply>& reply,
                                       std::optional<rpc::TaskSpec>* answered,
                                       std::optional<std::string>* refused) {
  if (reply.ok() && incarnation == actor.fenced_incarnation) {
    // Fencing: its node was declared dead; whatever it answers now is refused (the call is
    // resent to the restarted actor or fails, as the actor's state decides).
    reply = absl::UnavailableError("the reply came from a node declared dead; refused");
  }
  if (reply.ok() && incarnation == actor.incarnation) {
    actor.unreachable_since = absl::InfiniteFuture();  // the worker answers
  }
  auto it = actor.unanswered.find(seq);
  if (it == actor.unanswered.end()) return;  // already failed or answered
  Call& call = it->second;
  if (reply.ok() && call.cancel_reported) {
    // Failed as cancelled when Cancel dropped it; the actor only acknowledged skipping it.
    actor.unanswered.erase(it);
    actor.to_push.erase(seq);
  } else if (reply.ok()) {
    *answered = std::move(call.spec);
    actor.unanswered.erase(it);
    actor.to_push.erase(seq);  // an older push's late answer to a call waiting to be resent
  } else if (call.push_id != push_id) {
    // An older push of a call sent again since: the newer push decides.
  } else if (!IsTransportError(reply.status()) && call.cancel_reported) {
    actor.unanswered.erase(it);  // refused, but already failed as cancelled
    actor.to_push.erase(seq);
  } else if (!IsTransportError(reply.status())) {
    // The worker answered, refusing the call: sending it again would not help.
    *refused = absl::StrCat("the actor's worker at ", actor.address,
                            " refused the call: ", reply.status().ToString());
    *answered = std::move(call.spec);
    actor.unanswered.erase(it);
    actor.to_push.erase(seq);
  } else {
    call.in_flight = false;
    if (incarnation == actor.incarnation && !actor.resolving) {
      // The call may or may not have run. Ask the GCS what became of the actor: still there,
      // the call is resent (the actor answers a duplicate from its reply cache); restarted, it
      // is resent or failed per max_task_retries; dead, it fails.
      StartResolvingLocked(actor);
      const absl::Time now = clock_->Now();
      if (actor.unreachable_since == absl::InfiniteFuture()) {
        // Logged once per unreachable stretch: the resends that follow every kResendDelay
        // until the GCS decides would otherwise log a line each.
        TROUPE_LOG(Warning) << "call " << seq << " to actor " << actor_id.Hex().substr(0, 8)
                            << " at " << actor.address << " failed ("
                            << reply.status().message()
                            << "); asking the GCS about the actor (further failures are not "
                               "logged until it answers)";
        actor.unreachable_since = now;
        actor.next_lookup = absl::InfinitePast();  // the first failure: look at once
      } else {
        actor.next_lookup = now + kResendDelay;  // failing again: not in a tight loop
      }
    }
  }
}

void ActorTaskSubmitter::Apply(const ActorId& actor_id, const rpc::ActorInfo& info) {
  std::vector<std::tuple<rpc::TaskSpec, StoredObject::Error, std::string>> failures;
  {
    absl::MutexLock lock(&mu_);
    ActorState& actor = actors_[actor_id];
    actor.max_task_retries = info.max_task_retries();
    // Calls of an async actor or of one with concurrency groups may wait for later ones.
    actor.serial =
        info.max_concurrency() <= 1 && info.concurrency_groups().empty() && !info.async_actor();
    switch (info.state()) {
      case rpc::ActorInfo::DEAD:
        actor.dead = true;
        actor.resolving = false;
        actor.death_cause = info.death_cause();
        for (auto& [seq, call] : actor.unanswered) {
          AddFailure(call, StoredObject::Error::kActorDied,
                     absl::StrCat("the actor is dead: ", info.death_cause()), &failures);
        }
        actor.unanswered.clear();
        actor.to_push.clear();
        break;
      case rpc::ActorInfo::ALIVE:
        if (dead_nodes_.contains(info.node_id())) {
          // Stale: the GCS has declared the node dead but not yet restarted or buried the actor.
          actor.next_lookup = clock_->Now() + absl::Milliseconds(20);
          break;
        }
        if (info.worker_address() == actor.address && info.worker_id() == actor.worker_id) {
          // The same incarnation: a transport error, or a death the GCS has not noticed yet.
          actor.resolving = false;
          if (clock_->Now() - actor.unreachable_since < kUnreachableLimit) {
            // Resend what is not in flight; the actor runs each call once and answers a
            // duplicate with its first reply. Failing again brings us back here.
            for (auto& [seq, call] : actor.unanswered) {
              if (!call.in_flight) actor.to_push.insert(seq);
            }
            // Past the window: the pushes in flight may hold later calls waiting for these.
            FlushLocked(actor_id, actor, /*past_window=*/true);
            break;
          }
          // Never wait forever on a worker the GCS believes alive but no push reaches.
          for (auto& [seq, call] : actor.unanswered) {
            AddFailure(
                call, StoredObject::Error::kActorDied,
                absl::StrCat("the actor's worker at ", actor.address, " has failed every call for ",
                             absl::FormatDuration(kUnreachableLimit),
                             " while the GCS reports it alive (is it reachable from here?)"),
                &failures);
          }
          actor.unanswered.clear();
          actor.to_push.clear();
          actor.unreachable_since = absl::InfiniteFuture();
          break;
        }
        // A new incarnation: the actor restarted (or was just created).
        actor.address = info.worker_address();
        actor.worker_id = info.worker_id();
        actor.node_id = info.node_id();
        actor.incarnation++;
        actor.pushes_in_flight = 0;  // pushes to the old incarnation do not hold these back
        actor.resolving = false;
        actor.unreachable_since = absl::InfiniteFuture();
        for (auto it = actor.unanswered.begin(); it != actor.unanswered.end();) {
          Call& call = it->second;
          const bool may_resend =
              actor.max_task_retries < 0 || call.attempts <= actor.max_task_retries;
          if (call.sent && (!may_resend || call.force_cancelled)) {
            AddFailure(
                call, StoredObject::Error::kActorDied,
                absl::StrCat("the actor died while running this call (", info.death_cause(),
                             "); SetMaxTaskRetries lets calls be resent to the restarted actor"),
                &failures);
            it = actor.unanswered.erase(it);
          } else {
            ++it;
          }
        }
        // Everything goes to the new worker, also calls still in flight to the old one.
        actor.to_push.clear();
        for (auto& [seq, call] : actor.unanswered) actor.to_push.insert(actor.to_push.end(), seq);
        FlushLocked(actor_id, actor, /*past_window=*/true);
        break;
      default:  // PENDING_CREATION, RESTARTING
        actor.next_lookup = clock_->Now() + LookupInterval(actor);
        break;
    }
  }
  for (auto& [spec, error, message] : failures) Fail(spec, error, message);
}

void ActorTaskSubmitter::OnNodeDead(const NodeId& node_id) {
  std::vector<CallCanceller> cancels;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_ || !dead_nodes_.insert(node_id.Binary()).second) return;
    const absl::Time now = clock_->Now();
    for (auto& [id, actor] : actors_) {
      if (actor.dead || actor.node_id != node_id.Binary() ||
          actor.fenced_incarnation == actor.incarnation) {
        continue;
      }
      actor.fenced_incarnation = actor.incarnation;
      // Ask the GCS now what became of the actor (restarted elsewhere, or dead).
      StartResolvingLocked(actor);
      actor.next_lookup = absl::InfinitePast();
      if (actor.unreachable_since == absl::InfiniteFuture()) actor.unreachable_since = now;
      for (auto& [seq, call] : actor.unanswered) {
        if (call.in_flight && call.cancel) cancels.push_back(call.cancel);
      }
    }
  }
  // Their callbacks run with CANCELLED: a transport error, settled by the lookup above.
  for (auto& cancel : cancels) cancel();
}

absl::Duration ActorTaskSubmitter::LookupInterval(const ActorState& actor) const {
  // A tenth of the time it has been looked up for: prompt for an actor created a moment ago,
  // and a thousand actors waiting for workers cost the GCS a few batched calls a second.
  return std::clamp((clock_->Now() - actor.resolving_since) / 10, kMinLookupInterval,
                    kMaxLookupInterval);
}

void ActorTaskSubmitter::Tick() {
  std::vector<ActorId> due;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    const absl::Time now = clock_->Now();
    for (auto& [id, actor] : actors_) {
      if (actor.resolving && !actor.dead && now >= actor.next_lookup) {
        actor.next_lookup = now + LookupInterval(actor);
        due.push_back(id);
      }
    }
  }
  // Many actors at once (an actor ramp) are one call per kLookupBatch, not one each.
  for (size_t begin = 0; begin < due.size(); begin += kLookupBatch) {
    const size_t end = std::min(due.size(), begin + kLookupBatch);
    auto infos = directory_->GetActorInfos(
        std::vector<ActorId>(due.begin() + begin, due.begin() + end));
    if (!infos.ok()) return;  // asked again on a later tick
    for (const rpc::ActorInfo& info : *infos) {
      auto id = ActorId::FromBinary(info.actor_id());
      if (id.ok()) Apply(*id, info);
    }
  }
}

void ActorTaskSubmitter::StartResolvingLocked(ActorState& actor) {
  actor.resolving = true;
  actor.resolving_since = clock_->Now();
  if (callbacks_.wake_timer) callbacks_.wake_timer();
}

bool ActorTaskSubmitter::NeedsTick() const {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return false;
  for (const auto& [id, actor] : actors_) {
    if (actor.resolving && !actor.dead) return true;
  }
  return false;
}

void ActorTaskSubmitter::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  mu_.AwaitWithTimeout(absl::Condition(&drained), absl::Seconds(5));
}

}  // namespace troupe
