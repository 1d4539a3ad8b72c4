#include "src/rpc/grpc_peer_clients.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace troupe {

CallCanceller GrpcLeaseClient::RequestWorkerLease(const std::string& raylet_address,
                                                  const rpc::RequestWorkerLeaseRequest& request,
                                                  LeaseCallback done) {
  return raylets_->Get(raylet_address)->RequestWorkerLeaseAsync(request, std::move(done));
}

void GrpcLeaseClient::ReturnWorker(const std::string& raylet_address, const std::string& lease_id,
                                   bool disconnect) {
  raylets_->Get(raylet_address)->ReturnWorkerAsync(lease_id, disconnect);
}

absl::Status GrpcLeaseClient::ReturnWorkerAndWait(const std::string& raylet_address,
                                                  const std::string& lease_id, bool disconnect) {
  return raylets_->Get(raylet_address)->ReturnWorker(lease_id, disconnect);
}

void GrpcLeaseClient::KillLeasedWorker(const std::string& raylet_address,
                                       const std::string& lease_id, KillCallback done) {
  raylets_->Get(raylet_address)->KillLeasedWorkerAsync(lease_id, std::move(done));
}

void GrpcLeaseClient::ReserveBundle(const std::string& raylet_address,
                                    const PlacementGroupId& placement_group_id, int bundle_index,
                                    const std::map<std::string, double>& resources,
                                    const std::string& reservation_id, ReserveCallback done) {
  // A reservation is a lease request that is granted at once or refused, with no worker.
  rpc::RequestWorkerLeaseRequest request;
  rpc::TaskSpec* spec = request.mutable_resource_spec();
  for (const auto& [name, amount] : resources) (*spec->mutable_required_resources())[name] = amount;
  spec->set_placement_group_id(placement_group_id.Binary());
  spec->set_bundle_index(bundle_index);
  spec->set_bundle_reservation(true);
  request.set_grant_or_reject(true);
  request.set_reservation_id(reservation_id);
  raylets_->Get(raylet_address)
      ->RequestWorkerLeaseAsync(
          request, [done = std::move(done)](absl::StatusOr<rpc::RequestWorkerLeaseReply> reply) {
            if (!reply.ok()) return done(reply.status());
            if (reply->lease_id().empty()) {
              return done(absl::FailedPreconditionError(
                  reply->failure_message().empty()
                      ? "the raylet refused the reservation"
                      : absl::StrCat("the raylet refused the reservation: ",
                                     reply->failure_message())));
            }
            done(reply->lease_id());
          });
}

void GrpcLeaseClient::ReturnBundles(const std::string& raylet_address,
                                    const std::vector<std::string>& reservation_ids,
                                    ReturnCallback done) {
  raylets_->Get(raylet_address)->ReturnReservationsAsync(reservation_ids, std::move(done));
}

absl::StatusOr<double> ParseDropProbability(const std::string& what, const std::string& value) {
  if (value.empty()) return 0.0;
  double probability = 0;
  if (!absl::SimpleAtod(value, &probability) || !(probability >= 0 && probability <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a probability between 0 and 1, not '", value, "'"));
  }
  return probability;
}

bool GrpcTaskPushClient::DropThisReply() {
  absl::MutexLock lock(&random_mu_);
  return std::uniform_real_distribution<double>(0, 1)(random_) <
         faults_.drop_actor_reply_probability;
}

CallCanceller GrpcTaskPushClient::PushTask(const std::string& worker_address,
                                           rpc::PushTaskRequest request, PushCallback done) {
  if (faults_.drop_actor_reply_probability > 0 &&
      request.task().type() == rpc::TaskSpec::ACTOR_TASK) {
    done = [this, done = std::move(done)](absl::StatusOr<rpc::PushTaskReply> reply) {
      if (reply.ok() && DropThisReply()) {
        reply = absl::UnavailableError("testing: the actor's reply was dropped after delivery");
      }
      done(std::move(reply));
    };
  }
  return workers_->Get(worker_address)->PushTaskAsync(std::move(request), std::move(done));
}

CallCanceller GrpcTaskPushClient::PushTasks(const std::string& worker_address,
                                            rpc::PushTasksRequest request,
                                            PushResultsCallback done) {
  if (faults_.drop_actor_reply_probability > 0 && request.pushes_size() > 0 &&
      request.pushes(0).task().type() == rpc::TaskSpec::ACTOR_TASK) {
    done = [this, done = std::move(done)](PushResults results) {
      for (auto& [index, reply] : results) {
        if (reply.ok() && DropThisReply()) {
          reply = absl::UnavailableError("testing: the actor's reply was dropped after delivery");
        }
      }
      done(std::move(results));
    };
  }
  return workers_->Get(worker_address)->PushTasksAsync(std::move(request), std::move(done));
}

absl::StatusOr<rpc::ActorInfo> GrpcActorDirectory::GetActorInfo(const ActorId& actor_id) {
  rpc::GetActorInfoRequest request;
  request.set_actor_id(actor_id.Binary());
  return gcs_->GetActorInfo(request);
}

absl::StatusOr<std::vector<rpc::ActorInfo>> GrpcActorDirectory::GetActorInfos(
    const std::vector<ActorId>& ids) {
  return gcs_->GetActorInfos(ids);
}

}  // namespace troupe
