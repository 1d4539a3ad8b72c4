// What components ask of other processes, as plain C++ interfaces with no gRPC types: leasing
// workers from raylets, reserving placement-group bundles on them, pushing tasks to core workers,
// and reading an actor's entry from the GCS. Components take these by pointer (constructor
// injection); the composition root passes the gRPC implementations (grpc_peer_clients.h), tests
// pass FakePeerClients (fake_peer_clients.h).
// Peers are named by address ("host:port"). Implementations are thread-safe; callbacks run on an
// arbitrary thread (a gRPC thread for the real ones), never inside the call that started them,
// and the caller must not hold a lock the callback takes.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/gcs.pb.h"
#include "proto/raylet.pb.h"
#include "proto/worker.pb.h"
#include "src/common/ids.h"

namespace troupe {

// Cancels a call in flight; its callback then runs with CANCELLED (if it has not run yet).
using CallCanceller = std::function<void()>;

// "Lease a worker on node N", and give it back. The raylet grants (worker address and lease
// ID), redirects (spillback: retry_at_raylet_address) or refuses (rejected / infeasible).
class LeaseClient {
 public:
  using LeaseCallback = std::function<void(absl::StatusOr<rpc::RequestWorkerLeaseReply>)>;
  virtual ~LeaseClient() = default;

  virtual CallCanceller RequestWorkerLease(const std::string& raylet_address,
                                           const rpc::RequestWorkerLeaseRequest& request,
                                           LeaseCallback done) = 0;
  // Fire and forget: the raylet frees the lease's resources (and stops the worker when
  // `disconnect`).
  virtual void ReturnWorker(const std::string& raylet_address, const std::string& lease_id,
                            bool disconnect) = 0;
  // Like ReturnWorker, but waits for the raylet's answer (used when shutting down).
  virtual absl::Status ReturnWorkerAndWait(const std::string& raylet_address,
                                           const std::string& lease_id, bool disconnect) = 0;
  // Stops the leased worker's process; its exit is reported by the raylet as usual. `done` has
  // the raylet's answer (UNAVAILABLE or DEADLINE_EXCEEDED: not reached within 10 s).
  using KillCallback = std::function<void(absl::Status)>;
  virtual void KillLeasedWorker(const std::string& raylet_address, const std::string& lease_id,
                                KillCallback done) = 0;
};

// "Prepare / return a placement-group bundle" on a raylet. The two-phase commit of a group is:
// reserve every bundle (prepare; each raylet grants at once or refuses), then record the group
// CREATED in the GCS (commit) — or return the granted ones (rollback).
class BundleClient {
 public:
  // OK: the reservation ID. Not OK: refused (FAILED_PRECONDITION with the raylet's reason) or
  // unreachable.
  using ReserveCallback = std::function<void(absl::StatusOr<std::string>)>;
  virtual ~BundleClient() = default;

  // `reservation_id` is chosen by the caller: asking again with the same ID gets the same
  // reservation, and returning an ID the raylet has not seen yet makes it refuse that ID later.
  virtual void ReserveBundle(const std::string& raylet_address,
                             const PlacementGroupId& placement_group_id, int bundle_index,
                             const std::map<std::string, double>& resources,
                             const std::string& reservation_id, ReserveCallback done) = 0;
  // OK: the raylet took the batch back (an ID it did not hold is remembered and refused later).
  // Not OK: the raylet was not reached or did not answer; the caller may send the batch again.
  using ReturnCallback = std::function<void(absl::Status)>;
  // Frees the reservations, in one call to the raylet, which stops the workers leased from them.
  virtual void ReturnBundles(const std::string& raylet_address,
                             const std::vector<std::string>& reservation_ids,
                             ReturnCallback done) = 0;
};

// "Push a task to a core worker" (a leased worker, or an actor's worker).
class TaskPushClient {
 public:
  using PushCallback = std::function<void(absl::StatusOr<rpc::PushTaskReply>)>;
  virtual ~TaskPushClient() = default;

  virtual CallCanceller PushTask(const std::string& worker_address, rpc::PushTaskRequest request,
                                 PushCallback done) = 0;

  // Outcomes of some of a batch's pushes: (index in request.pushes, outcome as for PushTask).
  using PushResults = std::vector<std::pair<size_t, absl::StatusOr<rpc::PushTaskReply>>>;
  using PushResultsCallback = std::function<void(PushResults)>;
  // Pushes several normal tasks to one worker in one call. `done` runs once or more, never
  // concurrently, with outcomes as they arrive (several together when they arrive together),
  // until every push has had exactly one: a push the worker did not answer gets the call's
  // error (the worker died mid-batch, or the call was cancelled: CANCELLED).
  virtual CallCanceller PushTasks(const std::string& worker_address, rpc::PushTasksRequest request,
                                  PushResultsCallback done) = 0;
};

// "Where is this actor now?" (the GCS's actor table, as callers of an actor need it).
class ActorDirectory {
 public:
  virtual ~ActorDirectory() = default;
  // Blocking; NotFound for an unknown actor.
  virtual absl::StatusOr<rpc::ActorInfo> GetActorInfo(const ActorId& actor_id) = 0;
  // Blocking: the actors among `ids` the directory knows (unknown ones are left out). One call
  // for many where the directory supports it; by default one GetActorInfo each.
  virtual absl::StatusOr<std::vector<rpc::ActorInfo>> GetActorInfos(
      const std::vector<ActorId>& ids) {
    std::vector<rpc::ActorInfo> found;
    for (const ActorId& id : ids) {
      auto info = GetActorInfo(id);
      if (info.ok()) {
        found.push_back(*std::move(info));
      } else if (info.status().code() != absl::StatusCode::kNotFound) {
        return info.status();
      }
    }
    return found;
  }
};

}  // namespace troupe
