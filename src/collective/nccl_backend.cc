// The NCCL backend: one communicator per member, created from a unique id that rank 0 hands to
// the others over the group's control connections (so a re-created group never sees a stale id).
// Before that, rank 0 collects every member's GPU (uuid, PCI bus id) the same way and refuses a
// communicator in which two ranks share a GPU, naming both (NCCL would refuse it or hang).
//
// NCCL runs non-blocking (ncclConfig_t.blocking = 0): every call and every launched operation is
// watched until done — CUDA event, ncclCommGetAsyncError, and the peers' control connections —
// and given up at the deadline. Watching the peers is Mesh::CheckPeers, so with
// GroupOptions::hang_timeout a peer that fell silent (SIGSTOPped, frozen, its link cut) fails the
// operation naming it, as a dead one does. The first failure (a timeout, an NCCL error, a dead,
// aborting or hung peer) aborts the communicator at once (ncclCommAbort), which stops the NCCL
// kernel still waiting on the GPU: nothing keeps spinning until DestroyGroup, and later CUDA work
// on the device (cudaDeviceSynchronize, the default stream) goes on. From then on every operation
// fails at once saying the group is broken; DestroyGroup and InitGroup/CreateGroup make a new one.
//
// Buffers: every operation's pointers are checked (cudaPointerGetAttributes) before anything is
// queued; host memory is refused with an error naming the call and the group (nccl_checks.h).
//
// Device choice (ChooseNcclDevice in nccl_checks.h): TROUPE_GPU_IDS (set by the raylet) names the
// GPUs leased to this worker. With the default --gpu-visibility=all, CUDA_VISIBLE_DEVICES is left
// alone, every GPU of the node is visible (NCCL can map its peers for P2P/NVLink) and the member
// uses its first leased GPU; a leased GPU the process cannot see is an error. Under
// --gpu-visibility=assigned the worker sees only its GPUs and uses device 0. Without a lease (a
// driver) the member uses the device the process selected (cudaSetDevice; 0 by default).
//
// Thread-safety: operations run one at a time (the Group serialises them); Abort may come from
// any thread while one runs: `mu_` guards the communicator handle, which Abort frees.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/collective/backend.h"
#include "src/collective/cuda_status.h"
#include "src/collective/nccl_checks.h"
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
absl::StatusOr<int> ChooseDevice() {
  auto count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  DeviceChoice choice;
  choice.leased = GetGpuIds();
  const char* visibility = std::getenv("TROUPE_GPU_VISIBILITY");
  choice.visibility = visibility != nullptr ? visibility : "";
  choice.device_count = *count;
  if (auto s = CudaToStatus(cudaGetDevice(&choice.current_device), "cudaGetDevice"); !s.ok()) {
    return s;
  }
  return ChooseNcclDevice(choice);
}

// What identifies `device` among the GPUs of every member (see GpuIdentity).
absl::StatusOr<GpuIdentity> IdentifyGpu(int device) {
  cudaDeviceProp props;
  if (auto s = CudaToStatus(cudaGetDeviceProperties(&props, device), "cudaGetDeviceProperties");
      !s.ok()) {
    return s;
  }
  GpuIdentity identity;
  identity.device = device;
  identity.uuid = "GPU-";
  for (int i = 0; i < 16; ++i) {
    absl::StrAppend(&identity.uuid,
                    absl::Hex(static_cast<unsigned char>(props.uuid.bytes[i]), absl::kZeroPad2),
                    (i == 3 || i == 5 || i == 7 || i == 9) ? "-" : "");
  }
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device) == cudaSuccess) {
    identity.bus_id = bus_id;
  } else {
    cudaGetLastError();
    identity.bus_id = absl::StrCat("device ", device);
  }
  if (const char* host = std::getenv("NCCL_HOSTID")) identity.host = host;
  char hostname[256] = {};
  if (gethostname(hostname, sizeof(hostname) - 1) == 0) identity.node = hostname;
  return identity;
}

class NcclBackend : public CommBackend {
 public:
  NcclBackend(std::unique_ptr<Mesh> mesh, int device, std::string group)
      : mesh_(std::move(mesh)), device_(device), group_(std::move(group)) {}

  ~NcclBackend() override {
    AbortComm(absl::CancelledError("the group was destroyed"));
    if (event_ != nullptr) cudaEventDestroy(event_);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }

  absl::Status Init(absl::Time deadline) {
    if (auto s = CudaToStatus(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    auto id = ExchangeId(deadline);
    if (!id.ok()) return id.status();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclResult_t started =
        ncclCommInitRankConfig(&comm, mesh_->world_size(), *id, mesh_->rank(), &config);
    {
      absl::MutexLock lock(&mu_);
      comm_ = comm;
    }
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

  absl::Status CheckBuffer(const void* data, const std::string& call) override {
    if (data == nullptr) return absl::OkStatus();  // empty buffers: checked elsewhere
    cudaPointerAttributes attributes;
    cudaError_t error = cudaPointerGetAttributes(&attributes, data);
    if (error != cudaSuccess) {
      cudaGetLastError();  // older runtimes fail for plain host memory; do not leave it sticky
      return CheckNcclBuffer(static_cast<int>(MemoryKind::kUnregistered), call, group_);
    }
    if (auto s = CheckNcclBuffer(static_cast<int>(attributes.type), call, group_); !s.ok()) {
      return s;
    }
    if (attributes.type == cudaMemoryTypeDevice && attributes.device != device_) {
      return absl::InvalidArgumentError(
          absl::StrCat(call, " on NCCL group '", group_, "': the buffer is on CUDA device ",
                       attributes.device, " but this member's communicator uses device ", device_,
                       "; allocate it on that device (or copy it there)"));
    }
    return absl::OkStatus();
  }

  absl::Status AllReduce(void* data, size_t count, DataType dtype, ReduceOp op,
                         const OpContext& ctx) override {
    return Launch(ctx, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllReduce(data, data, count, ToNccl(dtype),
                           ToNccl(NcclReduceOp(op, mesh_->world_size())), comm, s);
    });
  }
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType dtype,
                         const OpContext& ctx) override {
    return Launch(ctx, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllGather(send, recv, count, ToNccl(dtype), comm, s);
    });
  }
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                             ReduceOp op, const OpContext& ctx) override {
    return Launch(ctx, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclReduceScatter(send, recv, recv_count, ToNccl(dtype),
                               ToNccl(NcclReduceOp(op, mesh_->world_size())), comm, s);
    });
  }
  absl::Status Broadcast(void* data, size_t count, DataType dtype, int root,
                         const OpContext& ctx) override {
    return Launch(ctx, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclBroadcast(data, data, count, ToNccl(dtype), root, comm, s);
    });
  }
  absl::Status Reduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
                      const OpContext& ctx) override {
    return Launch(ctx, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclReduce(data, data, count, ToNccl(dtype),
                        ToNccl(NcclReduceOp(op, mesh_->world_size())), root, comm, s);
    });
  }
  absl::Status Barrier(const OpContext& ctx) override {
    return Launch(ctx, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm, s);
    });
  }
  absl::Status Send(const void* data, size_t count, DataType dtype, int peer,
                    const OpContext& ctx) override {
    return Launch(ctx, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclSend(data, count, ToNccl(dtype), peer, comm, s);
    });
  }
  absl::Status Recv(void* data, size_t count, DataType dtype, int peer,
                    const OpContext& ctx) override {
    return Launch(ctx, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclRecv(data, count, ToNccl(dtype), peer, comm, s);
    });
  }

  void Abort(const absl::Status& status) override {
    mesh_->Abort(status);
    AbortComm(status);
  }

 private:
  // Rank 0 collects every member's GPU, refuses two ranks on one GPU (telling the others why) and
  // hands out the NCCL unique id.
  absl::StatusOr<ncclUniqueId> ExchangeId(absl::Time deadline) {
    const int rank = mesh_->rank(), world = mesh_->world_size();
    auto mine = IdentifyGpu(device_);
    if (!mine.ok()) return mine.status();
    ncclUniqueId id;
    if (rank != 0) {
      if (auto s = mesh_->SendControl(0, EncodeGpuIdentity(*mine)); !s.ok()) return s;
      auto message = mesh_->ReceiveControl(0, deadline);
      if (!message.ok()) return message.status();
      if (message->rfind("REFUSE\n", 0) == 0) {
        return absl::InvalidArgumentError(message->substr(7));
      }
      if (message->size() != 7 + sizeof(id) || message->rfind("NCCLID\n", 0) != 0) {
        return absl::InternalError("rank 0 sent no NCCL id");
      }
      std::memcpy(&id, message->data() + 7, sizeof(id));
      return id;
    }
    std::vector<GpuIdentity> members(world);
    members[0] = *mine;
    for (int peer = 1; peer < world; ++peer) {
      auto message = mesh_->ReceiveControl(peer, deadline);
      if (!message.ok()) return message.status();
      auto identity = DecodeGpuIdentity(*message);
      if (!identity) return absl::InternalError(absl::StrCat("rank ", peer, " sent no GPU"));
      members[peer] = *identity;
    }
    if (auto s = CheckDistinctGpus(members, group_); !s.ok()) {
      for (int peer = 1; peer < world; ++peer) {
        mesh_->SendControl(peer, absl::StrCat("REFUSE\n", s.message())).IgnoreError();
      }
      return s;
    }
    if (auto s = NcclToStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"); !s.ok()) return s;
    const std::string bytes(reinterpret_cast<const char*>(&id), sizeof(id));
    for (int peer = 1; peer < world; ++peer) {
      if (auto s = mesh_->SendControl(peer, "NCCLID\n" + bytes); !s.ok()) return s;
    }
    return id;
  }

  // Frees the communicator, stopping its kernels (idempotent, any thread). Later operations fail
  // with `aborted_`.
  void AbortComm(const absl::Status& why) {
    absl::MutexLock lock(&mu_);
    if (aborted_.ok()) aborted_ = why.ok() ? absl::CancelledError("aborted") : why;
    if (comm_ == nullptr) return;
    ncclCommAbort(comm_);  // the handle is gone even if it reports an error
    comm_ = nullptr;
  }

  // The error of an operation on a communicator already aborted.
  absl::Status BrokenError(const char* op) {
    absl::MutexLock lock(&mu_);
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": NCCL group '", group_,
        "' is broken: its communicator was aborted after an earlier failure (", aborted_.message(),
        "); DestroyGroup(\"", group_, "\") and create the group again"));
  }

  // ncclCommGetAsyncError under the lock: the state of the communicator's pending work, or the
  // broken-group error once it was aborted.
  absl::StatusOr<ncclResult_t> AsyncState(const char* op) {
    {
      absl::MutexLock lock(&mu_);
      if (comm_ != nullptr) {
        ncclResult_t state;
        ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
        if (queried != ncclSuccess) return NcclToStatus(queried, op);
        return state;
      }
    }
    return BrokenError(op);
  }

  // Polls until the communicator's pending work (init, or an enqueue) is done.
  absl::Status WaitForComm(const std::string& what, absl::Time deadline) {
    while (true) {
      auto state = AsyncState(what.c_str());
      if (!state.ok()) return state.status();
      if (*state == ncclSuccess) return absl::OkStatus();
      if (*state != ncclInProgress) return NcclToStatus(*state, what);
      if (auto peers = mesh_->CheckPeers(); !peers.ok()) return peers;
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(what + ": timed out (a member did not take part)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // Runs one operation; on failure aborts the communicator before returning (see the file
  // comment), so no NCCL kernel is left waiting on the GPU.
  template <typename Enqueue>
  absl::Status Launch(const OpContext& ctx, Enqueue enqueue) {
    absl::Status status = LaunchAndWait(ctx, enqueue);
    if (!status.ok()) AbortComm(status);  // idempotent: the first cause stays
    return status;
  }

  // Enqueues an NCCL operation on the caller's stream — by default the legacy default stream, so it
  // runs after whatever the caller queued there (LibTorch's default stream is that one) — then
  // waits for it to finish on the GPU while watching for asynchronous NCCL errors, dead peers
  // and the deadline.
  template <typename Enqueue>
  absl::Status LaunchAndWait(const OpContext& ctx, Enqueue enqueue) {
    const char* op = OpName(ctx.op);
    cudaStream_t stream =
        ctx.cuda_stream ? static_cast<cudaStream_t>(ctx.cuda_stream) : cudaStreamLegacy;
    if (auto s = CudaToStatus(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    bool aborted = false;
    ncclResult_t result = ncclSuccess;
    {
      absl::MutexLock lock(&mu_);
      if (comm_ == nullptr) {
        aborted = true;
      } else {
        result = enqueue(comm_, stream);
      }
    }
    if (aborted) return BrokenError(op);
    if (result != ncclSuccess && result != ncclInProgress) return NcclToStatus(result, op);
    if (auto s = WaitForComm(op, ctx.deadline); !s.ok()) return s;
    if (auto s = CudaToStatus(cudaEventRecord(event_, stream), "cudaEventRecord"); !s.ok()) {
      return s;
    }
    while (true) {
      cudaError_t done = cudaEventQuery(event_);
      if (done != cudaSuccess && done != cudaErrorNotReady) return CudaToStatus(done, op);
      auto state = AsyncState(op);  // also: aborted meanwhile (then the kernel quit early)
      if (!state.ok()) return state.status();
      if (*state != ncclSuccess && *state != ncclInProgress) return NcclToStatus(*state, op);
      if (done == cudaSuccess) return absl::OkStatus();
      if (auto peers = mesh_->CheckPeers(); !peers.ok()) return peers;
      if (absl::Now() >= ctx.deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("timed out after ", absl::FormatDuration(ctx.timeout),
                         " waiting for the NCCL kernel (a member is stuck or did not call ", op,
                         "); the communicator was aborted"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  std::unique_ptr<Mesh> mesh_;
  const int device_;
  const std::string group_;
  absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_) = nullptr;  // null once aborted
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);       // why the communicator was aborted
  cudaEvent_t event_ = nullptr;
  void* scratch_ = nullptr;
};

absl::StatusOr<std::unique_ptr<CommBackend>> MakeNcclBackend(std::unique_ptr<Mesh> mesh,
                                                             absl::Time deadline) {
  auto device = ChooseDevice();
  if (!device.ok()) return device.status();
  std::string group = mesh->group();
  auto backend = std::make_unique<NcclBackend>(std::move(mesh), *device, std::move(group));
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
