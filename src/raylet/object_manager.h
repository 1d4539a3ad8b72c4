// Moves objects between nodes. Fetch copies an object from another node's raylet into this
// node's store (a secondary copy), chunk by chunk through an ObjectPuller; several fetches of one
// object share one transfer. ServeObject reads an object of this node's store out in chunks for
// another raylet's pull; Free deletes objects from this node's store.
// No gRPC here: object_manager_grpc_service.h holds the ObjectManagerService glue (token check,
// request validation) and GrpcObjectPuller, the gRPC pull client.
// Owned by the Raylet; borrows the store and the puller (both must outlive it).
// Thread-safe; Fetch blocks the calling thread for the transfer, ServeObject for the stream.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/raylet.pb.h"
#include "src/common/ids.h"
#include "src/object_store/object_store.h"

namespace troupe {

inline constexpr int64_t kObjectChunkBytes = 4 << 20;

// Streams one object out of another node's raylet: the seam under ObjectManager::Fetch.
// GrpcObjectPuller is the real one. Implementations are thread-safe.
class ObjectPuller {
 public:
  // Gets one chunk of the stream, in order; an error stops the pull (the stream is cancelled).
  using ChunkHandler = std::function<absl::Status(const rpc::ObjectChunk& chunk)>;

  virtual ~ObjectPuller() = default;
  // Pulls object `id` from the raylet at `address` in chunks of at most `chunk_size` bytes,
  // handing each to `on_chunk`. Returns on_chunk's error if it failed, else the stream's error
  // (naming the raylet), else OK once the stream ended. Blocks until then.
  virtual absl::Status Pull(const std::string& address, const ObjectId& id, int64_t chunk_size,
                            const ChunkHandler& on_chunk) = 0;
};

class ObjectManager {
 public:
  ObjectManager(ObjectStore* store, ObjectPuller* puller);

  // Makes a copy of `id` in this node's store, pulled from the raylet at `from_raylet_address`.
  // OK at once if the store has it; joins a transfer of the same object already under way.
  absl::Status Fetch(const ObjectId& id, const std::string& from_raylet_address);

  // Reads object `id` out of this node's store in chunks of `chunk_size` bytes (0 or less:
  // kObjectChunkBytes), passing each to `write`; stops early, with OK, when `write` returns false
  // (the puller went away). NotFound if the store lacks the object; Internal if its file cannot
  // be read.
  absl::Status ServeObject(const ObjectId& id, int64_t chunk_size,
                           const std::function<bool(const rpc::ObjectChunk&)>& write);

  // Deletes `id` from this node's store (its primary copy included).
  void Free(const ObjectId& id);

 private:
  absl::Status Transfer(const ObjectId& id, const std::string& from_raylet_address);

  ObjectStore* const store_;
  ObjectPuller* const puller_;
  absl::Mutex mu_;
  absl::CondVar done_;
  // Fetches in progress, and the result of each finished one for waiters to read.
  absl::flat_hash_map<ObjectId, bool> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ObjectId, absl::Status> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
