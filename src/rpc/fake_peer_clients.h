// Test doubles for the peer-client interfaces (peer_clients.h): every call is recorded, and
// nothing answers until the test says so, so a test decides the order of events exactly.
//   FakeLeaseClient lease;  ...  FakeLeaseClient::LeaseCall call = lease.lease_request(0);
//   lease.ReplyLease(0, granted_reply);       // runs the component's callback on this thread
// Thread-safe; callbacks run on the thread of the Reply* call, without the fake's lock held.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "src/rpc/peer_clients.h"

namespace troupe {

class FakeLeaseClient : public LeaseClient, public BundleClient {
 public:
  struct LeaseCall {
    std::string raylet_address;
    rpc::RequestWorkerLeaseRequest request;
    LeaseCallback done;
    bool cancelled = false;
  };
  struct Returned {
    std::string raylet_address;
    std::string lease_id;
    bool disconnect;
  };
  struct ReserveCall {
    std::string raylet_address;
    PlacementGroupId placement_group_id;
    int bundle_index;
    std::map<std::string, double> resources;
    ReserveCallback done;
    std::string reservation_id;  // chosen by the caller
  };

  CallCanceller RequestWorkerLease(const std::string& raylet_address,
                                   const rpc::RequestWorkerLeaseRequest& request,
                                   LeaseCallback done) override {
    absl::MutexLock lock(&mu_);
    const size_t index = leases_.size();
    leases_.push_back({raylet_address, request, std::move(done)});
    return [this, index] {
      absl::MutexLock lock(&mu_);
      leases_[index].cancelled = true;
    };
  }
  void ReturnWorker(const std::string& raylet_address, const std::string& lease_id,
                    bool disconnect) override {
    absl::MutexLock lock(&mu_);
    returned_.push_back({raylet_address, lease_id, disconnect});
  }
  absl::Status ReturnWorkerAndWait(const std::string& raylet_address, const std::string& lease_id,
                                   bool disconnect) override {
    ReturnWorker(raylet_address, lease_id, disconnect);
    return absl::OkStatus();
  }
  // Answers at once (on the caller's thread) with the SetKillStatus status, or, after
  // HoldKills(), not until AnswerKills.
  void KillLeasedWorker(const std::string& raylet_address, const std::string& lease_id,
                        KillCallback done) override {
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      killed_.emplace_back(raylet_address, lease_id);
      if (hold_kills_) {
        held_kills_.push_back(std::move(done));
        return;
      }
      status = kill_status_;
    }
    done(status);
  }
  // What later KillLeasedWorker calls answer (OK by default), e.g. Unavailable for a dead raylet.
  void SetKillStatus(absl::Status status) {
    absl::MutexLock lock(&mu_);
    kill_status_ = std::move(status);
  }
  // Later kills wait for AnswerKills (a raylet that does not answer yet).
  void HoldKills() {
    absl::MutexLock lock(&mu_);
    hold_kills_ = true;
  }
  // Answers every held kill with `status`; returns how many there were.
  size_t AnswerKills(absl::Status status) {
    std::vector<KillCallback> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_kills_);
      hold_kills_ = false;
    }
    for (auto& done : held) done(status);
    return held.size();
  }
  void ReserveBundle(const std::string& raylet_address, const PlacementGroupId& placement_group_id,
                     int bundle_index, const std::map<std::string, double>& resources,
                     const std::string& reservation_id, ReserveCallback done) override {
    absl::MutexLock lock(&mu_);
    reserves_.push_back({raylet_address, placement_group_id, bundle_index, resources,
                         std::move(done), reservation_id});
  }
  // Answers at once (on the caller's thread) with return_status(); only batches answered OK are
  // recorded in returned_bundles().
  void ReturnBundles(const std::string& raylet_address,
                     const std::vector<std::string>& reservation_ids,
                     ReturnCallback done) override {
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      ++return_calls_;
      status = return_status_;
      if (status.ok()) {
        for (const auto& id : reservation_ids) returned_bundles_.emplace_back(raylet_address, id);
      }
    }
    done(status);
  }
  // Makes later ReturnBundles calls fail with `status` (OK again to recover).
  void set_return_status(absl::Status status) {
    absl::MutexLock lock(&mu_);
    return_status_ = std::move(status);
  }
  int num_return_calls() const {
    absl::MutexLock lock(&mu_);
    return return_calls_;
  }

  // Answers lease request `index` (in the order they were made). Each request is answered once.
  void ReplyLease(size_t index, absl::StatusOr<rpc::RequestWorkerLeaseReply> reply) {
    LeaseCallback done;
    {
      absl::MutexLock lock(&mu_);
      done = std::move(leases_.at(index).done);
    }
    done(std::move(reply));
  }
  void ReplyReserve(size_t index, absl::StatusOr<std::string> reply) {
    ReserveCallback done;
    {
      absl::MutexLock lock(&mu_);
      done = std::move(reserves_.at(index).done);
    }
    done(std::move(reply));
  }

  size_t num_lease_requests() const {
    absl::MutexLock lock(&mu_);
    return leases_.size();
  }
  LeaseCall lease_request(size_t index) const {  // a copy, without the callback
    absl::MutexLock lock(&mu_);
    LeaseCall call = leases_.at(index);
    call.done = nullptr;
    return call;
  }
  size_t num_reserve_requests() const {
    absl::MutexLock lock(&mu_);
    return reserves_.size();
  }
  ReserveCall reserve_request(size_t index) const {
    absl::MutexLock lock(&mu_);
    ReserveCall call = reserves_.at(index);
    call.done = nullptr;
    return call;
  }
  std::vector<Returned> returned_workers() const {
    absl::MutexLock lock(&mu_);
    return returned_;
  }
  std::vector<std::pair<std::string, std::string>> killed_workers() const {
    absl::MutexLock lock(&mu_);
    return killed_;
  }
  std::vector<std::pair<std::string, std::string>> returned_bundles() const {
    absl::MutexLock lock(&mu_);
    return returned_bundles_;
  }

 private:
  mutable absl::Mutex mu_;
  std::deque<LeaseCall> leases_ ABSL_GUARDED_BY(mu_);
  std::vector<Returned> returned_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> killed_ ABSL_GUARDED_BY(mu_);
  absl::Status kill_status_ ABSL_GUARDED_BY(mu_);
  bool hold_kills_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<KillCallback> held_kills_ ABSL_GUARDED_BY(mu_);
  std::deque<ReserveCall> reserves_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> returned_bundles_ ABSL_GUARDED_BY(mu_);
  absl::Status return_status_ ABSL_GUARDED_BY(mu_);
  int return_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// Records pushes. A PushTasks call is recorded as one push per task (in order, `batch` naming
// the call), each answered on its own by Reply; ReplyTogether answers several pushes of one call
// in one callback, as a stream message carrying several results does.
class FakeTaskPushClient : public TaskPushClient {
 public:
  struct PushCall {
    std::string worker_address;
    rpc::PushTaskRequest request;
    PushCallback done;
    bool cancelled = false;
    int batch = -1;  // which PushTasks call; -1 for PushTask
    size_t index_in_batch = 0;
  };

  CallCanceller PushTask(const std::string& worker_address, rpc::PushTaskRequest request,
                         PushCallback done) override {
    absl::MutexLock lock(&mu_);
    const size_t index = pushes_.size();
    pushes_.push_back({worker_address, std::move(request), std::move(done)});
    return [this, index] {
      absl::MutexLock lock(&mu_);
      pushes_[index].cancelled = true;
    };
  }
  CallCanceller PushTasks(const std::string& worker_address, rpc::PushTasksRequest request,
                          PushResultsCallback done) override {
    absl::MutexLock lock(&mu_);
    const int batch = num_batches_++;
    auto results = std::make_shared<PushResultsCallback>(std::move(done));
    std::vector<size_t> indices;
    for (int i = 0; i < request.pushes_size(); ++i) {
      indices.push_back(pushes_.size());
      PushCall call{worker_address, std::move(*request.mutable_pushes(i))};
      call.done = [results, i](absl::StatusOr<rpc::PushTaskReply> reply) {
        PushResults one;
        one.emplace_back(static_cast<size_t>(i), std::move(reply));
        (*results)(std::move(one));
      };
      call.batch = batch;
      call.index_in_batch = i;
      callbacks_[pushes_.size()] = results;
      pushes_.push_back(std::move(call));
    }
    return [this, indices] {
      absl::MutexLock lock(&mu_);
      for (size_t index : indices) pushes_[index].cancelled = true;
    };
  }
  // Answers push `index` (in the order they were made). Each push is answered once.
  void Reply(size_t index, absl::StatusOr<rpc::PushTaskReply> reply) {
    PushCallback done;
    {
      absl::MutexLock lock(&mu_);
      done = std::move(pushes_.at(index).done);
      pushes_.at(index).done = nullptr;
    }
    done(std::move(reply));
  }
  // Answers pushes of one PushTasks call in one callback (one stream message).
  void ReplyTogether(std::vector<std::pair<size_t, absl::StatusOr<rpc::PushTaskReply>>> replies) {
    std::shared_ptr<PushResultsCallback> done;
    PushResults results;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [index, reply] : replies) {
        done = callbacks_.at(index);
        pushes_.at(index).done = nullptr;
        results.emplace_back(pushes_.at(index).index_in_batch, std::move(reply));
      }
    }
    (*done)(std::move(results));
  }
  // Whether push `index` is still unanswered.
  bool pending(size_t index) const {
    absl::MutexLock lock(&mu_);
    return pushes_.at(index).done != nullptr;
  }
  size_t num_pushes() const {
    absl::MutexLock lock(&mu_);
    return pushes_.size();
  }
  // PushTasks calls made.
  int num_batches() const {
    absl::MutexLock lock(&mu_);
    return num_batches_;
  }
  PushCall push(size_t index) const {  // a copy, without the callback
    absl::MutexLock lock(&mu_);
    PushCall call = pushes_.at(index);
    call.done = nullptr;
    return call;
  }

 private:
  mutable absl::Mutex mu_;
  std::deque<PushCall> pushes_ ABSL_GUARDED_BY(mu_);
  int num_batches_ ABSL_GUARDED_BY(mu_) = 0;
  // The results callback of the PushTasks call behind each push made by one.
  std::map<size_t, std::shared_ptr<PushResultsCallback>> callbacks_ ABSL_GUARDED_BY(mu_);
};

class FakeActorDirectory : public ActorDirectory {
 public:
  absl::StatusOr<rpc::ActorInfo> GetActorInfo(const ActorId& actor_id) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    ++lookups_;
    auto it = actors_.find(actor_id.Binary());
    if (it == actors_.end()) return absl::NotFoundError("no such actor");
    return it->second;
  }
  absl::StatusOr<std::vector<rpc::ActorInfo>> GetActorInfos(
      const std::vector<ActorId>& ids) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    std::vector<rpc::ActorInfo> found;
    for (const ActorId& id : ids) {
      ++lookups_;
      auto it = actors_.find(id.Binary());
      if (it != actors_.end()) found.push_back(it->second);
    }
    return found;
  }
  // The info's actor_id is set to `actor_id`, as the GCS's is.
  void Set(const ActorId& actor_id, rpc::ActorInfo info) {
    absl::MutexLock lock(&mu_);
    info.set_actor_id(actor_id.Binary());
    actors_[actor_id.Binary()] = std::move(info);
  }
  // Actors looked up, and calls made for them (one GetActorInfos is one call for many).
  int lookups() const {
    absl::MutexLock lock(&mu_);
    return lookups_;
  }
  int calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, rpc::ActorInfo> actors_ ABSL_GUARDED_BY(mu_);
  int lookups_ ABSL_GUARDED_BY(mu_) = 0;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace troupe
