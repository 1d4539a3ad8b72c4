#include "src/collective/staging_backend.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/collective/reduce.h"

namespace troupe::collective {
namespace {

// Says which part of a chunked operation failed, keeping the peer at fault.
absl::Status InChunk(const absl::Status& status, size_t chunk, size_t chunks, size_t first,
                     size_t count, size_t total) {
  if (status.ok() || chunks == 1) return status;
  return PeerError(status.code(), PeerOf(status),
                   absl::StrCat("chunk ", chunk + 1, " of ", chunks, " (elements ", first, "..",
                                first + count, " of ", total, "): ", status.message()));
}

absl::Status Staging(const absl::Status& status, const char* what) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("staging device memory through pinned host "
                                                  "memory (",
                                                  what, "): ", status.message()));
}

}  // namespace

StagingBackend::StagingBackend(std::unique_ptr<CommBackend> inner, DeviceMemory* memory, int rank,
                               int world_size, size_t chunk_bytes)
    : inner_(std::move(inner)),
      memory_(memory),
      rank_(rank),
      world_(world_size),
      chunk_bytes_(std::max<size_t>(chunk_bytes, 8)) {}

StagingBackend::~StagingBackend() {
  for (Buffer& buffer : pinned_) {
    if (buffer.data != nullptr) memory_->FreeHost(buffer.data);
  }
}

bool StagingBackend::IsDevice(const void* ptr) const {
  return memory_ != nullptr && ptr != nullptr && memory_->IsDevice(ptr);
}

absl::StatusOr<char*> StagingBackend::Pinned(int which, size_t bytes) {
  Buffer& buffer = pinned_[which];
  if (buffer.bytes >= bytes && buffer.data != nullptr) return buffer.data;
  if (buffer.data != nullptr) memory_->FreeHost(buffer.data);
  buffer = {};
  auto allocated = memory_->AllocateHost(std::max<size_t>(bytes, 1));
  if (!allocated.ok()) return Staging(allocated.status(), "allocating pinned memory");
  buffer = {static_cast<char*>(*allocated), bytes};
  return buffer.data;
}

absl::Status StagingBackend::Chunked(void* data_ptr, size_t count, DataType dtype, bool copy_in,
                                     bool copy_out, const OpContext& ctx, const ChunkOp& op) {
  char* data = static_cast<char*>(data_ptr);
  const size_t unit = ElementSize(dtype);
  const size_t per_chunk = std::max<size_t>(1, chunk_bytes_ / unit);
  const size_t chunks = count == 0 ? 1 : (count + per_chunk - 1) / per_chunk;
  auto first = [&](size_t k) { return k * per_chunk; };
  auto size = [&](size_t k) { return std::min(per_chunk, count - first(k)); };
  if (count == 0) return op(data, 0);
  if (!IsDevice(data)) {  // host memory: the same chunks, in place
    for (size_t k = 0; k < chunks; ++k) {
      absl::Status status = op(data + first(k) * unit, size(k));
      if (!status.ok()) return InChunk(status, k, chunks, first(k), size(k), count);
    }
    return absl::OkStatus();
  }
  // Two slots: while the collective works on chunk k in slot k % 2, the queue copies chunk
  // k - 1's result out of the other slot and then chunk k + 1 into it. The queue runs copies in
  // order, so the copy in never overtakes the copy out of the same slot.
  char* slots[2];
  for (int s = 0; s < 2; ++s) {
    auto slot = Pinned(s, per_chunk * unit);
    if (!slot.ok()) return slot.status();
    slots[s] = *slot;
  }
  auto queue = memory_->NewCopyQueue(data, ctx.cuda_stream);
  if (!queue.ok()) return Staging(queue.status(), "starting the copies");
  CopyQueue& copies = **queue;
  std::vector<int> in(chunks, -1), out(chunks, -1);
  auto copy_in_chunk = [&](size_t k) -> absl::Status {
    if (!copy_in) return absl::OkStatus();
    auto ticket =
        copies.Copy(slots[k % 2], data + first(k) * unit, size(k) * unit, CopyDirection::kToHost);
    if (!ticket.ok()) return Staging(ticket.status(), "device to host");
    in[k] = *ticket;
    return absl::OkStatus();
  };
  if (absl::Status status = copy_in_chunk(0); !status.ok()) return status;
  for (size_t k = 0; k < chunks; ++k) {
    if (copy_in) {
      if (absl::Status status = copies.Wait(in[k]); !status.ok()) {
        return Staging(status, "device to host");
      }
    } else if (k >= 2 && out[k - 2] >= 0) {
      // Output only: the collective writes the slot on the CPU, outside the queue's order.
      if (absl::Status status = copies.Wait(out[k - 2]); !status.ok()) {
        return Staging(status, "host to device");
      }
    }
    if (k + 1 < chunks) {
      if (absl::Status status = copy_in_chunk(k + 1); !status.ok()) return status;
    }
    absl::Status status = op(slots[k % 2], size(k));
    if (!status.ok()) return InChunk(status, k, chunks, first(k), size(k), count);
    if (copy_out) {
      auto ticket = copies.Copy(data + first(k) * unit, slots[k % 2], size(k) * unit,
                                CopyDirection::kToDevice);
      if (!ticket.ok()) return Staging(ticket.status(), "host to device");
      out[k] = *ticket;
    }
  }
  if (copy_out) {
    if (absl::Status status = copies.Wait(out[chunks - 1]); !status.ok()) {
      return Staging(status, "host to device");
    }
  }
  return Staging(copies.OrderCallerAfterCopies(), "ordering the caller's stream");
}

absl::Status StagingBackend::AllReduce(void* data, size_t count, DataType dtype, ReduceOp op,
                                       const OpContext& ctx) {
  if (world_ == 1) return inner_->AllReduce(data, count, dtype, op, ctx);  // nothing moves
  return Chunked(
      data, count, dtype, /*copy_in=*/true, /*copy_out=*/true, ctx,
      [&](void* chunk, size_t n) { return inner_->AllReduce(chunk, n, dtype, op, ctx); });
}

absl::Status StagingBackend::Broadcast(void* data, size_t count, DataType dtype, int root,
                                       const OpContext& ctx) {
  if (world_ == 1) return inner_->Broadcast(data, count, dtype, root, ctx);
  const bool is_root = rank_ == root;
  return Chunked(data, count, dtype, is_root, !is_root, ctx, [&](void* chunk, size_t n) {
    return inner_->Broadcast(chunk, n, dtype, root, ctx);
  });
}

absl::Status StagingBackend::Reduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
                                    const OpContext& ctx) {
  if (world_ == 1) return inner_->Reduce(data, count, dtype, op, root, ctx);
  // Only the root's buffer changes.
  const bool is_root = rank_ == root;
  return Chunked(data, count, dtype, /*copy_in=*/true, is_root, ctx, [&](void* chunk, size_t n) {
    return inner_->Reduce(chunk, n, dtype, op, root, ctx);
  });
}

// --- Staged whole -------------------------------------------------------------------------------

namespace {

// One operation's whole-buffer staging: copies the device input to pinned memory before the
// operation and the pinned output back to the device after it.
class WholeStaging {
 public:
  WholeStaging(DeviceMemory* memory, const OpContext& ctx) : memory_(memory), ctx_(ctx) {}

  // The host address the operation reads `bytes` of input from.
  absl::StatusOr<const void*> In(const void* data, size_t bytes, char* pinned) {
    if (pinned == nullptr) return data;
    if (absl::Status status = Start(data); !status.ok()) return status;
    auto ticket = (*queue_)->Copy(pinned, data, bytes, CopyDirection::kToHost);
    if (!ticket.ok()) return Staging(ticket.status(), "device to host");
    if (absl::Status status = (*queue_)->Wait(*ticket); !status.ok()) {
      return Staging(status, "device to host");
    }
    return pinned;
  }
  // After the operation wrote `bytes` to `pinned` (null: it wrote `data` directly).
  absl::Status Out(void* data, size_t bytes, char* pinned) {
    if (pinned == nullptr) return absl::OkStatus();
    if (absl::Status status = Start(data); !status.ok()) return status;
    auto ticket = (*queue_)->Copy(data, pinned, bytes, CopyDirection::kToDevice);
    if (!ticket.ok()) return Staging(ticket.status(), "host to device");
    if (absl::Status status = (*queue_)->Wait(*ticket); !status.ok()) {
      return Staging(status, "host to device");
    }
    return Staging((*queue_)->OrderCallerAfterCopies(), "ordering the caller's stream");
  }

 private:
  absl::Status Start(const void* device_ptr) {
    if (queue_.has_value()) return absl::OkStatus();
    auto made = memory_->NewCopyQueue(device_ptr, ctx_.cuda_stream);
    if (!made.ok()) return Staging(made.status(), "starting the copies");
    queue_ = std::move(*made);
    return absl::OkStatus();
  }

  DeviceMemory* memory_;
  const OpContext& ctx_;
  std::optional<std::unique_ptr<CopyQueue>> queue_;
};

}  // namespace

absl::Status StagingBackend::AllGather(const void* send, void* recv, size_t count, DataType dtype,
                                       const OpContext& ctx) {
  const size_t bytes = count * ElementSize(dtype);
  const bool send_device = IsDevice(send), recv_device = IsDevice(recv);
  if (!send_device && !recv_device) return inner_->AllGather(send, recv, count, dtype, ctx);
  char* pinned_send = nullptr;
  char* pinned_recv = nullptr;
  if (send_device) {
    auto pinned = Pinned(0, bytes);
    if (!pinned.ok()) return pinned.status();
    pinned_send = *pinned;
  }
  if (recv_device) {
    auto pinned = Pinned(1, bytes * world_);
    if (!pinned.ok()) return pinned.status();
    pinned_recv = *pinned;
  }
  WholeStaging staging(memory_, ctx);
  auto in = staging.In(send, bytes, pinned_send);
  if (!in.ok()) return in.status();
  absl::Status status =
      inner_->AllGather(*in, pinned_recv != nullptr ? pinned_recv : recv, count, dtype, ctx);
  if (!status.ok()) return status;
  return staging.Out(recv, bytes * world_, pinned_recv);
}

absl::Status StagingBackend::ReduceScatter(const void* send, void* recv, size_t recv_count,
                                           DataType dtype, ReduceOp op, const OpContext& ctx) {
  const size_t bytes = recv_count * ElementSize(dtype);
  const bool send_device = IsDevice(send), recv_device = IsDevice(recv);
  if (!send_device && !recv_device) {
    return inner_->ReduceScatter(send, recv, recv_count, dtype, op, ctx);
  }
  char* pinned_send = nullptr;
  char* pinned_recv = nullptr;
  if (send_device) {
    auto pinned = Pinned(0, bytes * world_);
    if (!pinned.ok()) return pinned.status();
    pinned_send = *pinned;
  }
  if (recv_device) {
    auto pinned = Pinned(1, bytes);
    if (!pinned.ok()) return pinned.status();
    pinned_recv = *pinned;
  }
  WholeStaging staging(memory_, ctx);
  auto in = staging.In(send, bytes * world_, pinned_send);
  if (!in.ok()) return in.status();
  absl::Status status = inner_->ReduceScatter(*in, pinned_recv != nullptr ? pinned_recv : recv,
                                              recv_count, dtype, op, ctx);
  if (!status.ok()) return status;
  return staging.Out(recv, bytes, pinned_recv);
}

absl::Status StagingBackend::Send(const void* data, size_t count, DataType dtype, int peer,
                                  const OpContext& ctx) {
  if (!IsDevice(data)) return inner_->Send(data, count, dtype, peer, ctx);
  const size_t bytes = count * ElementSize(dtype);
  auto pinned = Pinned(0, bytes);
  if (!pinned.ok()) return pinned.status();
  WholeStaging staging(memory_, ctx);
  auto in = staging.In(data, bytes, *pinned);
  if (!in.ok()) return in.status();
  return inner_->Send(*in, count, dtype, peer, ctx);
}

absl::Status StagingBackend::Recv(void* data, size_t count, DataType dtype, int peer,
                                  const OpContext& ctx) {
  if (!IsDevice(data)) return inner_->Recv(data, count, dtype, peer, ctx);
  const size_t bytes = count * ElementSize(dtype);
  auto pinned = Pinned(1, bytes);
  if (!pinned.ok()) return pinned.status();
  WholeStaging staging(memory_, ctx);
  absl::Status status = inner_->Recv(*pinned, count, dtype, peer, ctx);
  if (!status.ok()) return status;
  return staging.Out(data, bytes, *pinned);
}

}  // namespace troupe::collective
