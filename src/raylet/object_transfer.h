// ObjectTransfer: one copy of one object pulled from other nodes into this node's store.
// It pulls the first chunk alone (that tells the object's size and owner), creates the copy in
// the store and maps it, then pulls the rest as ranges over several streams at once, each on its
// own connection; every chunk is copied once, from the received message into the mapping. If a
// source fails, the unfinished part of its range and every later range come from the next
// source; when no source is left the copy is aborted (never sealed half-written, never leaked).
// Memory: at most `streams` chunks per transfer are being received, and the raylet-wide
// TransferSlots caps the streams of all transfers together.
// Created, run and destroyed by ObjectManager::Fetch on the fetching thread; Run starts and
// joins its own stream threads. Internal state is guarded by mu_.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "src/common/ids.h"
#include "src/object_store/object_store.h"
#include "src/raylet/object_puller.h"

namespace troupe {

struct ObjectTransferOptions {
  // Bytes per data message. Chosen by measurement (docs/benchmarks_history.md): 1 MiB moved 1 GB
  // at 1.26 GB/s where 256 KiB gave 0.90, 512 KiB 1.16 and 4 MiB 0.76 (a serving stream
  // waits for each message's write to finish, so smaller messages overlap better, down to
  // where per-message costs take over).
  int64_t chunk_bytes = 1 << 20;
  // Bytes one stream asks for at a time: the unit that is handed to another stream or source.
  int64_t range_bytes = 16 << 20;
  // Streams (and connections) per transfer. Bytes in flight per transfer: about
  // streams x (chunk_bytes + gRPC's per-stream flow-control window).
  int streams = 4;
};

// A raylet-wide cap on the streams of all transfers together (so on the bytes in flight).
// Thread-safe.
class TransferSlots {
 public:
  explicit TransferSlots(int slots) : free_(slots) {}
  // Blocks until a slot is free.
  void Acquire();
  void Release();

 private:
  absl::Mutex mu_;
  int free_ ABSL_GUARDED_BY(mu_);
};

class ObjectTransfer {
 public:
  // `sources`: raylet addresses with a copy, tried in order (at least one). Borrows the rest.
  ObjectTransfer(ObjectStore* store, ObjectPuller* puller, TransferSlots* slots,
                 const ObjectTransferOptions& options, const ObjectId& id,
                 std::vector<std::string> sources);
  ~ObjectTransfer();
  ObjectTransfer(const ObjectTransfer&) = delete;
  ObjectTransfer& operator=(const ObjectTransfer&) = delete;

  // Pulls the object and seals the copy. On error the copy is aborted: ResourceExhausted (or
  // FailedPrecondition) if the store refused it, else the last source's error, naming it.
  // Call once.
  absl::Status Run();

 private:
  struct Range {
    int64_t begin;
    int64_t end;
  };
  class RangeSink;

  // Pulls the first chunk from the first source that answers; creates and maps the copy.
  absl::Status PullFirstChunk();
  absl::Status CreateCopy(const rpc::ObjectChunk& header);
  // Allocates and maps the copy's pages under `range` in one go, before its chunks arrive, so
  // copying them in takes no page fault per page.
  void Populate(const Range& range) const;
  // One stream's loop: takes ranges until none is left or every source failed.
  void RunStream(int connection);
  // `source` failed with `status`: later pulls go to the next source, if any. Logs the first
  // failure of a transfer and, once no source is left, one line summing up the rest (never a
  // line per source: a request may name many).
  void SourceFailedLocked(const std::string& source, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ObjectStore* const store_;
  ObjectPuller* const puller_;
  TransferSlots* const slots_;
  const ObjectTransferOptions options_;
  const ObjectId id_;
  const std::vector<std::string> sources_;

  // Set once by PullFirstChunk, before the stream threads start; read-only after.
  int64_t size_ = -1;
  bool created_ = false;
  char* mapped_ = nullptr;
  absl::Status create_status_;  // why the store refused the copy

  absl::Mutex mu_;
  std::deque<Range> pending_ ABSL_GUARDED_BY(mu_);
  size_t source_index_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_source_error_ ABSL_GUARDED_BY(mu_);
  int64_t received_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace troupe
