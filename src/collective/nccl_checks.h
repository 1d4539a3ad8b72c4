// The NCCL backend's decisions, kept apart from CUDA and NCCL so that a machine without a GPU
// tests them: which device a member uses, whether a buffer may go to NCCL, and whether the
// members of a communicator sit on distinct GPUs. nccl_backend.cc feeds them what the CUDA
// runtime reports. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "troupe/collective.h"

namespace troupe::collective {

// --- Buffers ---------------------------------------------------------------------------------
// cudaPointerGetAttributes' `type` (cudaMemoryType), by value: the CUDA headers stay out.
enum class MemoryKind : int { kUnregistered = 0, kHost = 1, kDevice = 2, kManaged = 3 };

// OK for device and managed memory. Host memory (pageable or pinned) and anything else is
// InvalidArgument naming `call` ("AllReduce") and `group`, saying to move the tensor to the GPU
// or to use a CPU-backend group.
absl::Status CheckNcclBuffer(int memory_type, const std::string& call, const std::string& group);

// The public function name of an operation ("allreduce" -> "AllReduce"), for messages.
std::string CallName(const std::string& op);

// --- Reductions ----------------------------------------------------------------------------
// The reduction NCCL is asked for. kAvg over a world of one is kSum (the same values): NCCL up
// to 2.29.6 leaves the tail of a one-rank average unwritten (NVIDIA/nccl#1950, fixed in
// 2.29.7; PyTorch 2.11 ships 2.28.9), which the GPU check found as zeros in the last 3 of
// 2^20 + 3 elements of a ReduceScatter. Every other case passes through.
ReduceOp NcclReduceOp(ReduceOp op, int world_size);

// --- Device choice ---------------------------------------------------------------------------
struct DeviceChoice {
  std::vector<int> leased;  // TROUPE_GPU_IDS: the GPUs the raylet leased to this worker
  std::string visibility;   // TROUPE_GPU_VISIBILITY: "all" (default) or "assigned"
  int device_count = 0;     // devices the CUDA runtime sees in this process
  int current_device = 0;   // cudaGetDevice: what the process selected (drivers, no lease)
};

// The CUDA device a member uses: its first leased GPU (under "assigned" the process sees only
// its GPUs, so device 0); without a lease, the device the process selected (cudaSetDevice).
// A device the runtime does not see is FailedPrecondition, never a silent other GPU.
absl::StatusOr<int> ChooseNcclDevice(const DeviceChoice& choice);

// --- Distinct GPUs ---------------------------------------------------------------------------
// What identifies the GPU a member uses. Two members share a GPU when host and uuid match; the
// host is NCCL_HOSTID when set (NCCL then treats the members as on different hosts, too), else
// empty — a GPU uuid is unique across machines.
struct GpuIdentity {
  std::string host;    // NCCL_HOSTID or ""
  std::string uuid;    // "GPU-8d2f…"
  std::string bus_id;  // "0000:1A:00.0"
  int device = -1;     // the CUDA device index in that member's process
  std::string node;    // hostname, for messages
};

// One line-based message ("GPUID\n...") and back; nullopt for anything else.
std::string EncodeGpuIdentity(const GpuIdentity& identity);
std::optional<GpuIdentity> DecodeGpuIdentity(const std::string& message);

// `members[r]` is rank r's GPU. InvalidArgument naming both ranks and the GPU when two ranks
// share one: NCCL refuses (or hangs on) such a communicator.
absl::Status CheckDistinctGpus(const std::vector<GpuIdentity>& members, const std::string& group);

}  // namespace troupe::collective
