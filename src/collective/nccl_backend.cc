// The NCCL backend: one communicator per member, created from a unique id that rank 0 hands to
// the others over the group's control connections (so a re-created group never sees a stale id).
//
// NCCL runs non-blocking (ncclConfig_t.blocking = 0): every call and every launched operation is
// watched until done — CUDA event, ncclCommGetAsyncError, and the peers' control connections —
// and given up at the deadline. A dead or aborting peer thus fails the operation within ~1 ms of
// its connection closing instead of hanging in a kernel; the communicator is aborted
// (ncclCommAbort) when the group is destroyed.
//
// Device choice: TROUPE_GPU_IDS (set by the raylet) names the GPUs leased to this worker. With
// the default --gpu-visibility=all, CUDA_VISIBLE_DEVICES is left alone, every GPU of the node is
// visible (NCCL can map its peers for P2P/NVLink) and the member uses its first leased GPU.
// Under --gpu-visibility=assigned the worker sees only its GPUs and uses device 0. Elsewhere
// (a driver) it uses device rank % device count.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "src/collective/backend.h"
#include "src/collective/cuda_status.h"
#include "troupe/actor.h"

namespace troupe::collective {
namespace {

ncclDataType_t ToNccl(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;
  }
  return ncclSum;
}

// The CUDA device this member should use (see the file comment).
absl::StatusOr<int> ChooseDevice(int rank) {
  auto count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  const std::vector<int> leased = GetGpuIds();
  if (!leased.empty()) {
    const char* visibility = std::getenv("TROUPE_GPU_VISIBILITY");
    if (visibility != nullptr && std::string(visibility) == "assigned") return 0;  // masked
    if (leased[0] < *count) return leased[0];
  }
  return rank % *count;
}

class NcclBackend : public CommBackend {
 public:
  NcclBackend(std::unique_ptr<Mesh> mesh, int device) : mesh_(std::move(mesh)), device_(device) {}

  ~NcclBackend() override {
    if (comm_ != nullptr) ncclCommAbort(comm_);  // also frees a communicator stuck in a kernel
    if (event_ != nullptr) cudaEventDestroy(event_);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }

  absl::Status Init(absl::Time deadline) {
    if (auto s = CudaToStatus(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    ncclUniqueId id;
    const int rank = mesh_->rank(), world = mesh_->world_size();
    if (rank == 0) {
      if (auto s = NcclToStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"); !s.ok()) return s;
      const std::string bytes(reinterpret_cast<const char*>(&id), sizeof(id));
      for (int peer = 1; peer < world; ++peer) {
        if (auto s = mesh_->SendControl(peer, "NCCLID\n" + bytes); !s.ok()) return s;
      }
    } else {
      auto message = mesh_->ReceiveControl(0, deadline);
      if (!message.ok()) return message.status();
      if (message->size() != 7 + sizeof(id) || message->rfind("NCCLID\n", 0) != 0) {
        return absl::InternalError("rank 0 sent no NCCL id");
      }
      std::memcpy(&id, message->data() + 7, sizeof(id));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t started = ncclCommInitRankConfig(&comm_, world, id, rank, &config);
    if (started != ncclSuccess && started != ncclInProgress) {
      return NcclToStatus(started, "ncclCommInitRankConfig");
    }
    if (auto s = WaitForComm("creating the NCCL communicator", deadline); !s.ok()) return s;
    if (auto s = CudaToStatus(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming),
                              "cudaEventCreate");
        !s.ok()) {
      return s;
    }
    return CudaToStatus(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc of the barrier buffer");
  }

  absl::Status AllReduce(void* data, size_t count, DataType dtype, ReduceOp op,
                         const OpContext& ctx) override {
    return Launch(ctx, [&](cudaStream_t s) {
      return ncclAllReduce(data, data, count, ToNccl(dtype), ToNccl(op), comm_, s);
    });
  }
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType dtype,
                         const OpContext& ctx) override {
    return Launch(ctx, [&](cudaStream_t s) {
      return ncclAllGather(send, recv, count, ToNccl(dtype), comm_, s);
    });
  }
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                             ReduceOp op, const OpContext& ctx) override {
    return Launch(ctx, [&](cudaStream_t s) {
      return ncclReduceScatter(send, recv, recv_count, ToNccl(dtype), ToNccl(op), comm_, s);
    });
  }
  absl::Status Broadcast(void* data, size_t count, DataType dtype, int root,
                         const OpContext& ctx) override {
    return Launch(ctx, [&](cudaStream_t s) {
      return ncclBroadcast(data, data, count, ToNccl(dtype), root, comm_, s);
    });
  }
  absl::Status Reduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
                      const OpContext& ctx) override {
    return Launch(ctx, [&](cudaStream_t s) {
      return ncclReduce(data, data, count, ToNccl(dtype), ToNccl(op), root, comm_, s);
    });
  }
  absl::Status Barrier(const OpContext& ctx) override {
    return Launch(ctx, [&](cudaStream_t s) {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, s);
    });
  }
  absl::Status Send(const void* data, size_t count, DataType dtype, int peer,
                    const OpContext& ctx) override {
    return Launch(
        ctx, [&](cudaStream_t s) { return ncclSend(data, count, ToNccl(dtype), peer, comm_, s); });
  }
  absl::Status Recv(void* data, size_t count, DataType dtype, int peer,
                    const OpContext& ctx) override {
    return Launch(
        ctx, [&](cudaStream_t s) { return ncclRecv(data, count, ToNccl(dtype), peer, comm_, s); });
  }

  void Abort(const absl::Status& status) override { mesh_->Abort(status); }

 private:
  // Polls until the communicator's pending work (init, or an enqueue) is done.
  absl::Status WaitForComm(const std::string& what, absl::Time deadline) {
    while (true) {
      ncclResult_t state;
      ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
      if (queried != ncclSuccess) return NcclToStatus(queried, what);
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) return NcclToStatus(state, what);
      if (auto peers = mesh_->CheckPeers(); !peers.ok()) return peers;
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(what + ": timed out (a member did not take part)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // Enqueues an NCCL operation on the caller's stream — by default the legacy default stream, so it
  // runs after whatever the caller queued there (LibTorch's default stream is that one) — then
  // waits for it to finish on the GPU while watching for asynchronous NCCL errors, dead peers
  // and the deadline.
  template <typename Enqueue>
  absl::Status Launch(const OpContext& ctx, Enqueue enqueue) {
    cudaStream_t stream =
        ctx.cuda_stream ? static_cast<cudaStream_t>(ctx.cuda_stream) : cudaStreamLegacy;
    if (auto s = CudaToStatus(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    ncclResult_t result = enqueue(stream);
    if (result != ncclSuccess && result != ncclInProgress) {
      return NcclToStatus(result, OpName(ctx.op));
    }
    if (auto s = WaitForComm(OpName(ctx.op), ctx.deadline); !s.ok()) return s;
    if (auto s = CudaToStatus(cudaEventRecord(event_, stream), "cudaEventRecord"); !s.ok()) {
      return s;
    }
    while (true) {
      cudaError_t done = cudaEventQuery(event_);
      if (done == cudaSuccess) return absl::OkStatus();
      if (done != cudaErrorNotReady) return CudaToStatus(done, OpName(ctx.op));
      ncclResult_t state;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress) {
        return NcclToStatus(state, OpName(ctx.op));
      }
      if (auto peers = mesh_->CheckPeers(); !peers.ok()) return peers;
      if (absl::Now() >= ctx.deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("timed out after ", absl::FormatDuration(ctx.timeout),
                         " waiting for the NCCL kernel (a member is stuck or did not call ",
                         OpName(ctx.op), ")"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  std::unique_ptr<Mesh> mesh_;
  const int device_;
  ncclComm_t comm_ = nullptr;
  cudaEvent_t event_ = nullptr;
  void* scratch_ = nullptr;
};

absl::StatusOr<std::unique_ptr<CommBackend>> MakeNcclBackend(std::unique_ptr<Mesh> mesh,
                                                             absl::Time deadline) {
  auto device = ChooseDevice(mesh->rank());
  if (!device.ok()) return device.status();
  auto backend = std::make_unique<NcclBackend>(std::move(mesh), *device);
  if (auto status = backend->Init(deadline); !status.ok()) return status;
  return std::unique_ptr<CommBackend>(std::move(backend));
}

// Linked in (alwayslink) wherever CUDA is built: makes Backend::kNccl available.
const bool registered = [] {
  RegisterNcclFactory(MakeNcclBackend);
  return true;
}();

}  // namespace
}  // namespace troupe::collective
