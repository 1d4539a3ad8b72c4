// Which collective backend DataParallelTrainer gives its workers' group, from
// ScalingConfig::collective_backend, use_gpu, the GPUs per worker and where the workers landed.
//
//   "cpu"  : the CPU backend (CUDA tensors are staged through pinned host memory).
//   "nccl" : NCCL; needs use_gpu, a whole number (>= 1) of GPUs per worker and no GPU shared by
//            two workers of one node (NCCL refuses two ranks on one device) — else an error.
//   "auto" : NCCL exactly when "nccl" would be accepted, else the CPU backend. With use_gpu and
//            whole GPUs that is today's NCCL; fractional GPUs ({"GPU": 0.5}) get the CPU backend.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "troupe/collective.h"

namespace troupe::train::internal {

// Before placement: the request is one of auto, cpu, nccl, and "nccl" is possible at all with
// these resources. InvalidArgument says what is wrong and what to ask for instead.
absl::Status CheckCollectiveBackend(const std::string& requested, bool use_gpu,
                                    double gpus_per_worker);

struct WorkerGpus {
  std::string node;       // the node the worker runs on
  std::vector<int> gpus;  // the GPU ids it leased there (empty: none)
};

// After placement (workers by rank). FailedPrecondition when "nccl" was asked for and the
// placement cannot run it (a worker without a GPU, or workers sharing one).
absl::StatusOr<collective::Backend> ChooseCollectiveBackend(const std::string& requested,
                                                            bool use_gpu, double gpus_per_worker,
                                                            const std::vector<WorkerGpus>& workers);

const char* BackendName(collective::Backend backend);

}  // namespace troupe::train::internal
