// Moves objects between nodes. Fetch copies an object from another node's raylet into this
// node's store (a secondary copy), streaming it in chunks; several fetches of one object share
// one transfer. Serve answers other raylets' pulls from this node's store.
// Thread-safe; Fetch blocks the calling thread for the transfer.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/raylet.grpc.pb.h"
#include "src/common/ids.h"
#include "src/object_store/object_store.h"
#include "src/rpc/auth.h"

namespace troupe {

inline constexpr int64_t kObjectChunkBytes = 4 << 20;

class ObjectManager : public rpc::ObjectManagerService::Service {
 public:
  ObjectManager(ObjectStore* store, const ClusterToken& token);

  absl::Status Fetch(const ObjectId& id, const std::string& from_raylet_address);

  // ObjectManagerService (synchronous gRPC handlers).
  grpc::Status PullObject(grpc::ServerContext* context, const rpc::PullObjectRequest* request,
                          grpc::ServerWriter<rpc::ObjectChunk>* writer) override;
  grpc::Status FreeObjects(grpc::ServerContext* context, const rpc::FreeObjectsRequest* request,
                           rpc::FreeObjectsReply* reply) override;

 private:
  absl::Status Transfer(const ObjectId& id, const std::string& from_raylet_address);

  ObjectStore* store_;
  const std::string token_text_;
  TokenAuthenticator auth_;
  absl::Mutex mu_;
  absl::CondVar done_;
  // Fetches in progress, and the result of each finished one for waiters to read.
  absl::flat_hash_map<ObjectId, bool> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ObjectId, absl::Status> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
