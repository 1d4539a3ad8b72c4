// GrpcObjectPuller: the ObjectPuller that ObjectManager::Fetch pulls through, a PullObject
// stream (ObjectManagerService) to the other raylet carrying this cluster's token. The header
// has no gRPC types; only grpc_object_puller.cc knows gRPC.
// Owned by the Raylet. Thread-safe: immutable, a channel per pull.
#pragma once

#include <cstdint>
#include <string>

#include "src/raylet/object_manager.h"

namespace troupe {

class GrpcObjectPuller : public ObjectPuller {
 public:
  // `token`: this cluster's token, as text.
  explicit GrpcObjectPuller(std::string token) : token_(std::move(token)) {}

  absl::Status Pull(const std::string& address, const ObjectId& id, int64_t chunk_size,
                    const ChunkHandler& on_chunk) override;

 private:
  const std::string token_;
};

}  // namespace troupe
