#include "src/train/collective_choice.h"

#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace troupe::train::internal {
namespace {

bool Whole(double gpus) { return gpus >= 1 && std::floor(gpus) == gpus; }

constexpr char kInstead[] =
    "; use collective_backend \"cpu\" (or \"auto\", which picks the CPU backend here): it stages "
    "CUDA tensors through pinned host memory";

}  // namespace

const char* BackendName(collective::Backend backend) {
  return backend == collective::Backend::kNccl ? "nccl" : "cpu";
}

absl::Status CheckCollectiveBackend(const std::string& requested, bool use_gpu,
                                    double gpus_per_worker) {
  if (requested != "auto" && requested != "cpu" && requested != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat(
        "ScalingConfig.collective_backend must be auto, cpu or nccl, got '", requested, "'"));
  }
  if (requested != "nccl") return absl::OkStatus();
  if (!use_gpu) {
    return absl::InvalidArgumentError(
        "ScalingConfig.collective_backend \"nccl\" needs use_gpu = true (NCCL runs on GPUs); "
        "set use_gpu, or use collective_backend \"cpu\"");
  }
  if (!Whole(gpus_per_worker)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ScalingConfig.collective_backend \"nccl\" needs whole GPUs per worker, but each worker "
        "asks for GPU: ",
        gpus_per_worker, " (workers sharing a GPU cannot be ranks of one NCCL communicator)",
        kInstead));
  }
  return absl::OkStatus();
}

absl::StatusOr<collective::Backend> ChooseCollectiveBackend(
    const std::string& requested, bool use_gpu, double gpus_per_worker,
    const std::vector<WorkerGpus>& workers) {
  if (absl::Status status = CheckCollectiveBackend(requested, use_gpu, gpus_per_worker);
      !status.ok()) {
    return status;
  }
  if (requested == "cpu") return collective::Backend::kCpu;
  if (!use_gpu || !Whole(gpus_per_worker)) return collective::Backend::kCpu;  // "auto"
  // NCCL needs a GPU per rank, none shared within a node.
  std::map<std::pair<std::string, int>, int> holder;  // (node, gpu) -> rank
  for (size_t rank = 0; rank < workers.size(); ++rank) {
    if (workers[rank].gpus.empty()) {
      if (requested == "auto") return collective::Backend::kCpu;
      return absl::FailedPreconditionError(absl::StrCat("collective_backend \"nccl\": worker rank ",
                                                        rank, " on node ", workers[rank].node,
                                                        " has no GPU", kInstead));
    }
    for (int gpu : workers[rank].gpus) {
      auto [it, fresh] = holder.emplace(std::make_pair(workers[rank].node, gpu), rank);
      if (fresh) continue;
      if (requested == "auto") return collective::Backend::kCpu;
      return absl::FailedPreconditionError(
          absl::StrCat("collective_backend \"nccl\": worker ranks ", it->second, " and ", rank,
                       " share GPU ", gpu, " of node ", workers[rank].node,
                       " (NCCL refuses two ranks on one device)", kInstead));
    }
  }
  return collective::Backend::kNccl;
}

}  // namespace troupe::train::internal
