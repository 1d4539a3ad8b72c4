// Moves objects between nodes. Fetch copies an object from other nodes' raylets into this node's
// store (a secondary copy) through an ObjectTransfer: several streams at once, each chunk copied
// once straight into the copy's shared memory, moving on to the next source if one fails
// mid-transfer; several fetches of one object share one transfer. ServeObject reads a byte range
// of an object of this node's store out in chunks for another raylet's pull; Free deletes
// objects from this node's store.
// No gRPC here: object_manager_grpc_service.h holds the ObjectManagerService glue (token check,
// request validation) and grpc_object_puller.h the gRPC pull client.
// Owned by the Raylet; borrows the store and the puller (both must outlive it).
// Thread-safe; Fetch blocks the calling thread for the transfer, ServeObject for the stream.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/raylet.pb.h"
#include "src/common/ids.h"
#include "src/object_store/object_store.h"
#include "src/raylet/object_puller.h"
#include "src/raylet/object_transfer.h"

namespace troupe {

inline constexpr int64_t kObjectChunkBytes = ObjectTransferOptions{}.chunk_bytes;

struct ObjectManagerOptions {
  ObjectTransferOptions transfer;
  // Streams of all transfers together (each holds at most one chunk being received): the
  // raylet-wide cap on bytes in flight is about this many chunks.
  int max_streams = 16;
  // Testing only: ServeObject sleeps this long before each data chunk, so a test can act
  // (kill the source) while a transfer is under way. Zero in production.
  absl::Duration testing_serve_chunk_delay = absl::ZeroDuration();
};

// Where ServeObject's stream goes: first a header message (object_id, total_size, owner), then
// the range's bytes in order. Each call returns false when the puller went away.
class ChunkWriter {
 public:
  virtual ~ChunkWriter() = default;
  virtual bool WriteHeader(const rpc::ObjectChunk& header) = 0;
  // `data` (the object's bytes at `offset`, in a read-only mapping of the stored object) stays
  // valid as long as a copy of `mapping` is held: a writer may send it without copying and let
  // go of `mapping` once sent. The last copy unmaps it and unpins the object in the store.
  virtual bool WriteData(int64_t offset, const char* data, int64_t length,
                         const std::shared_ptr<const void>& mapping) = 0;
};

class ObjectManager {
 public:
  ObjectManager(ObjectStore* store, ObjectPuller* puller, ObjectManagerOptions options = {});

  // Makes a copy of `id` in this node's store, pulled from `sources` (raylet addresses with a
  // copy, tried in order; at least one). OK at once if the store has it; joins a transfer of
  // the same object already under way. On error no copy is left (see ObjectTransfer::Run).
  absl::Status Fetch(const ObjectId& id, const std::vector<std::string>& sources);

  // Serves bytes [offset, offset + length) of object `id` (length 0: to its end) to `writer` in
  // data messages of at most `chunk_size` bytes (0 or less: kObjectChunkBytes); stops early, with
  // OK, when the writer says the puller went away. NotFound if the store lacks the object;
  // OutOfRange if `offset` lies past its end; Internal if its file cannot be mapped.
  absl::Status ServeObject(const ObjectId& id, int64_t offset, int64_t length, int64_t chunk_size,
                           ChunkWriter* writer);

  // Deletes `id` from this node's store (its primary copy included).
  void Free(const ObjectId& id);

 private:
  // ServeObject once the object is pinned; releases the pin (at once, or with the mapping).
  absl::Status ServePinned(const ObjectStore::Location& location, const ObjectId& id,
                           int64_t offset, int64_t length, int64_t chunk_size, ChunkWriter* writer);

  ObjectStore* const store_;
  ObjectPuller* const puller_;
  const ObjectManagerOptions options_;
  TransferSlots slots_;
  absl::Mutex mu_;
  absl::CondVar done_;
  // Fetches in progress, and the result of each finished one for waiters to read.
  absl::flat_hash_map<ObjectId, bool> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ObjectId, absl::Status> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
