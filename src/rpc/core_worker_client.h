// Client for another process's CoreWorkerService (proto/worker.proto): pushing tasks to leased
// workers and asking owners about their objects. Thread-safe. ClientPool shares one client per
// address.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.grpc.pb.h"

namespace troupe {

// Create with std::make_shared: asynchronous calls keep the client alive until they complete.
class CoreWorkerClient : public std::enable_shared_from_this<CoreWorkerClient> {
 public:
  CoreWorkerClient(std::string address, std::string token);
  const std::string& address() const { return address_; }

  // `done` runs on a gRPC thread. The request is moved into the call. The returned function
  // cancels the call.
  std::function<void()> PushTaskAsync(rpc::PushTaskRequest request,
                                      std::function<void(absl::StatusOr<rpc::PushTaskReply>)> done);
  // Several normal tasks in one streaming call (PushTasks in proto/worker.proto). `on_results`
  // runs on gRPC threads, never concurrently, with (index, outcome) pairs as results arrive,
  // until every push has had exactly one outcome; those the stream ended without get its error.
  // The returned function cancels the call.
  using PushResults = std::vector<std::pair<size_t, absl::StatusOr<rpc::PushTaskReply>>>;
  std::function<void()> PushTasksAsync(rpc::PushTasksRequest request,
                                       std::function<void(PushResults)> on_results);
  // `lost_copies`: raylets the caller could not read the object from (a borrower reporting
  // a loss to the owner).
  absl::StatusOr<rpc::GetObjectStatusReply> GetObjectStatus(
      const std::string& object_id, absl::Duration wait,
      const std::vector<std::string>& lost_copies = {});
  // The owner answers once the object is ready or after `wait` (PENDING). `done` runs on a gRPC
  // thread; the returned function cancels the call.
  std::function<void()> GetObjectStatusAsync(
      const std::string& object_id, absl::Duration wait,
      std::function<void(absl::StatusOr<rpc::GetObjectStatusReply>)> done);
  void AddObjectLocationAsync(const std::string& object_id, const std::string& raylet_address,
                              const std::string& node_id);
  void AddBorrowersAsync(const std::vector<std::string>& ids, const std::string& borrower);
  // Waits for the owner's answer (at most `timeout`), so a later RemoveBorrowers cannot
  // overtake it.
  absl::Status AddBorrowers(const std::vector<std::string>& ids, const std::string& borrower,
                            absl::Duration timeout);
  void RemoveBorrowersAsync(const std::vector<std::string>& ids, const std::string& borrower);
  // ReportStreamItem (proto/worker.proto): waits for the owner's answer, which comes once its
  // reader is close enough to this item (backpressure): no deadline. An owner that is gone
  // fails the call (the connection breaks).
  absl::StatusOr<rpc::ReportStreamItemReply> ReportStreamItem(
      const rpc::ReportStreamItemRequest& request);
  // CancelTask (proto/worker.proto); fire and forget.
  void CancelTaskAsync(const std::string& task_id, bool recursive);
  void ExitAsync();

 private:
  std::string address_;
  std::string token_;
  std::string peer_name_;
  std::unique_ptr<rpc::CoreWorkerService::Stub> stub_;
};

template <typename Client>
class ClientPool {
 public:
  explicit ClientPool(std::string token) : token_(std::move(token)) {}
  std::shared_ptr<Client> Get(const std::string& address) {
    absl::MutexLock lock(&mu_);
    auto& slot = clients_[address];
    if (!slot) slot = std::make_shared<Client>(address, token_);
    return slot;
  }
  // Drops the pool's client for `address` (its peer is gone); calls in flight keep theirs alive.
  // A later Get makes a new one.
  void Forget(const std::string& address) {
    std::shared_ptr<Client> dropped;  // destroyed after the lock is released
    absl::MutexLock lock(&mu_);
    auto it = clients_.find(address);
    if (it == clients_.end()) return;
    dropped = std::move(it->second);
    clients_.erase(it);
  }

 private:
  const std::string token_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Client>> clients_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
