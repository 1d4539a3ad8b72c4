// The seam under node-to-node object transfer: an ObjectPuller streams a byte range of an object
// out of another node's raylet into a ChunkSink, which says where each chunk's bytes go (straight
// into the destination copy's shared memory). GrpcObjectPuller is the real puller; the tests use
// a fake. No gRPC here.
// Interfaces only: implementations say their own thread-safety; a ChunkSink is used by one pull
// at a time, on the pulling thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/raylet.pb.h"
#include "src/common/ids.h"

namespace troupe {

// Receives one pull's stream: first its header, then its data in order.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  // The stream's first message (object_id, total_size, owner; no data). An error stops the pull.
  virtual absl::Status OnHeader(const rpc::ObjectChunk& header) = 0;
  // Where the `length` bytes at object offset `offset` go: the puller copies them there, then
  // calls Placed. An error (a chunk out of order or outside the asked range) stops the pull.
  virtual absl::StatusOr<char*> Place(int64_t offset, int64_t length) = 0;
  virtual void Placed(int64_t offset, int64_t length) = 0;
};

// What one pull asks for.
struct PullRange {
  std::string address;  // the serving raylet, host:port
  ObjectId id;
  int64_t offset = 0;
  int64_t length = 0;  // 0: to the end of the object
  int64_t chunk_size = 0;
  // Pulls with different `connection` numbers to one address go over different TCP
  // connections, so several streams of one transfer do not share one connection's window.
  int connection = 0;
};

class ObjectPuller {
 public:
  virtual ~ObjectPuller() = default;
  // Pulls `range`, handing its header and chunks to `sink`. Returns the sink's error if it
  // failed (the stream is cancelled), else the stream's error (naming the raylet), else OK once
  // the stream ended. Blocks until then. Thread-safe in every implementation.
  virtual absl::Status Pull(const PullRange& range, ChunkSink* sink) = 0;
};

}  // namespace troupe
