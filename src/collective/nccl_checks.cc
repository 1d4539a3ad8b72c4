#include "src/collective/nccl_checks.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace troupe::collective {

std::string CallName(const std::string& op) {
  static const std::pair<const char*, const char*> kNames[] = {{"allreduce", "AllReduce"},
                                                               {"allgather", "AllGather"},
                                                               {"reduce_scatter", "ReduceScatter"},
                                                               {"broadcast", "Broadcast"},
                                                               {"reduce", "Reduce"},
                                                               {"barrier", "Barrier"},
                                                               {"send", "Send"},
                                                               {"recv", "Recv"}};
  for (const auto& [from, to] : kNames) {
    if (op == from) return to;
  }
  return op;
}

absl::Status CheckNcclBuffer(int memory_type, const std::string& call, const std::string& group) {
  switch (static_cast<MemoryKind>(memory_type)) {
    case MemoryKind::kDevice:
    case MemoryKind::kManaged:
      return absl::OkStatus();
    case MemoryKind::kHost:
    case MemoryKind::kUnregistered:
      break;
  }
  const char* what = static_cast<MemoryKind>(memory_type) == MemoryKind::kHost
                         ? "pinned host memory"
                         : "host memory (not allocated by CUDA)";
  return absl::InvalidArgumentError(absl::StrCat(
      call, " on NCCL group '", group, "': the buffer is ", what,
      "; NCCL works on GPU memory only. Move the tensor to the GPU (tensor.to(torch::kCUDA), "
      "cudaMalloc) or run this reduction in a group created with Backend::kCpu"));
}

absl::StatusOr<int> ChooseNcclDevice(const DeviceChoice& choice) {
  if (choice.device_count < 1) {
    return absl::FailedPreconditionError("the CUDA runtime sees no GPU in this process");
  }
  if (!choice.leased.empty()) {
    if (choice.visibility == "assigned") return 0;  // CUDA_VISIBLE_DEVICES masks to the lease
    const int leased = choice.leased[0];
    if (leased < 0 || leased >= choice.device_count) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this worker was leased GPU ", leased,
          " (TROUPE_GPU_IDS=", absl::StrJoin(choice.leased, ","),
          ") but the CUDA runtime sees only ", choice.device_count,
          " device(s) in this process: with --gpu-visibility=all a GPU "
          "worker must see every GPU of its node (is CUDA_VISIBLE_DEVICES set in the raylet's or "
          "the worker's environment?); start the node with --gpu-visibility=assigned, or unset "
          "CUDA_VISIBLE_DEVICES"));
    }
    return leased;
  }
  if (choice.current_device < 0 || choice.current_device >= choice.device_count) {
    return absl::FailedPreconditionError(absl::StrCat("the current CUDA device ",
                                                      choice.current_device, " is not one of the ",
                                                      choice.device_count, " this process sees"));
  }
  return choice.current_device;
}

std::string EncodeGpuIdentity(const GpuIdentity& identity) {
  return absl::StrCat("GPUID\n", identity.host, "\n", identity.uuid, "\n", identity.bus_id, "\n",
                      identity.device, "\n", identity.node);
}

std::optional<GpuIdentity> DecodeGpuIdentity(const std::string& message) {
  std::vector<std::string> lines = absl::StrSplit(message, '\n');
  GpuIdentity identity;
  if (lines.size() != 6 || lines[0] != "GPUID" || lines[2].empty() ||
      !absl::SimpleAtoi(lines[4], &identity.device)) {
    return std::nullopt;
  }
  identity.host = lines[1];
  identity.uuid = lines[2];
  identity.bus_id = lines[3];
  identity.node = lines[5];
  return identity;
}

absl::Status CheckDistinctGpus(const std::vector<GpuIdentity>& members, const std::string& group) {
  for (size_t i = 0; i < members.size(); ++i) {
    for (size_t j = i + 1; j < members.size(); ++j) {
      if (members[i].uuid != members[j].uuid || members[i].host != members[j].host) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "NCCL group '", group, "': ranks ", i, " and ", j, " both use GPU ", members[i].bus_id,
          " (", members[i].uuid, ", CUDA device ", members[i].device, " in rank ", i, ", device ",
          members[j].device, " in rank ", j,
          members[i].node.empty() ? "" : absl::StrCat(", on ", members[i].node),
          "); NCCL needs a GPU of its own for every rank. Give each member a whole GPU "
          "(SetResources({{\"GPU\", 1}}); a driver selects its device with cudaSetDevice before "
          "InitGroup), or make the group with Backend::kCpu"));
    }
  }
  return absl::OkStatus();
}

ReduceOp NcclReduceOp(ReduceOp op, int world_size) {
  return op == ReduceOp::kAvg && world_size == 1 ? ReduceOp::kSum : op;
}

}  // namespace troupe::collective
