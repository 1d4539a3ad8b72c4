// The CPU backend for device buffers: a CommBackend in front of another (the CpuBackend) that
// lets callers pass CUDA device memory to a CPU group by staging it through pinned host memory.
// Host buffers go straight through (no copies, no CUDA calls).
//
//   AllReduce, Broadcast, Reduce: split into chunks of kChunkBytes, run as one collective per
//     chunk, pipelined over two pinned chunk buffers: the device-to-host copy of chunk k + 1 and
//     the host-to-device copy of chunk k - 1 run while the CPU collective works on chunk k.
//     Members chunk by size alone, whatever their memory, so host and device members mix.
//   AllGather, ReduceScatter, Send, Recv: staged whole (copy in, the operation, copy out). Their
//     input and output blocks are laid out differently per rank (and Send/Recv pairs may mix host
//     and device memory), so chunks would not line up across members.
//   Barrier: no buffers.
// Copies run after the work queued on CallOptions::cuda_stream when the operation starts, and
// work queued on that stream after the operation returns runs after the results landed.
//
// Owns the inner backend and its pinned buffers; `memory` (may be null: all memory is host)
// outlives it. Thread-compatible: the Group runs one operation at a time; Abort may come from
// any thread.
#pragma once

#include <memory>

#include "src/collective/backend.h"
#include "src/collective/device_memory.h"

namespace troupe::collective {

class StagingBackend : public CommBackend {
 public:
  // Big enough that per-chunk latency is small next to the chunk's transfer, small enough that a
  // 25 MB gradient bucket pipelines over several chunks.
  static constexpr size_t kChunkBytes = 4 << 20;

  StagingBackend(std::unique_ptr<CommBackend> inner, DeviceMemory* memory, int rank, int world_size,
                 size_t chunk_bytes = kChunkBytes);
  ~StagingBackend() override;

  absl::Status AllReduce(void* data, size_t count, DataType dtype, ReduceOp op,
                         const OpContext& ctx) override;
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType dtype,
                         const OpContext& ctx) override;
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                             ReduceOp op, const OpContext& ctx) override;
  absl::Status Broadcast(void* data, size_t count, DataType dtype, int root,
                         const OpContext& ctx) override;
  absl::Status Reduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
                      const OpContext& ctx) override;
  absl::Status Barrier(const OpContext& ctx) override { return inner_->Barrier(ctx); }
  absl::Status Send(const void* data, size_t count, DataType dtype, int peer,
                    const OpContext& ctx) override;
  absl::Status Recv(void* data, size_t count, DataType dtype, int peer,
                    const OpContext& ctx) override;
  void Abort(const absl::Status& status) override { inner_->Abort(status); }

 private:
  // The inner operation on `count` elements of host memory at `data`.
  using ChunkOp = std::function<absl::Status(void* data, size_t count)>;
  // Runs `op` chunk by chunk over `data`; for device memory, copies each chunk to host first
  // (`copy_in`) and back afterwards (`copy_out`), pipelined.
  absl::Status Chunked(void* data, size_t count, DataType dtype, bool copy_in, bool copy_out,
                       const OpContext& ctx, const ChunkOp& op);
  bool IsDevice(const void* ptr) const;
  // Pinned host buffer `which` (0 or 1) of at least `bytes`, grown as needed.
  absl::StatusOr<char*> Pinned(int which, size_t bytes);

  std::unique_ptr<CommBackend> inner_;
  DeviceMemory* const memory_;
  const int rank_, world_;
  const size_t chunk_bytes_;
  struct Buffer {
    char* data = nullptr;
    size_t bytes = 0;
  };
  // [0], [1]: the chunk pipeline's two slots, or whole-buffer staging's input and output.
  Buffer pinned_[2];
};

}  // namespace troupe::collective
