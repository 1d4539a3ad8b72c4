// GrpcObjectPuller: the ObjectPuller that object transfers pull through, a PullObject stream
// (ObjectManagerService) to the other raylet carrying this cluster's token. It reads the stream
// as raw gRPC byte buffers and parses each data message itself, so a chunk's bytes are copied
// once, from gRPC's receive buffers straight to where the ChunkSink places them (no protobuf
// string in between). Pulls with different PullRange::connection numbers use different
// channels (each its own TCP connection, from src/rpc's MakeChannel). The header has no gRPC
// types; only grpc_object_puller.cc knows gRPC.
// Owned by the Raylet. Thread-safe: the channel cache takes a lock; each pull has its own call.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "src/raylet/object_puller.h"

namespace grpc {
class Channel;
}

namespace troupe {

class GrpcObjectPuller : public ObjectPuller {
 public:
  // `token`: this cluster's token, as text.
  explicit GrpcObjectPuller(std::string token) : token_(std::move(token)) {}

  absl::Status Pull(const PullRange& range, ChunkSink* sink) override;

 private:
  std::shared_ptr<grpc::Channel> Channel(const std::string& address, int connection);

  const std::string token_;
  absl::Mutex mu_;
  // Channels by (address, connection). Dropped all at once when it grows past a bound (channels
  // to raylets that are gone), so it cannot grow without end.
  absl::flat_hash_map<std::pair<std::string, int>, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
