// CUDA and NCCL at the boundary: their error codes become absl::Status here, once, so collective
// code above never sees a cudaError_t or ncclResult_t. Built only where the CUDA toolkit is
// present (see bazel/cuda.bzl); "no GPU" and "no driver" are ordinary Unavailable results.
// Stateless; thread-safe.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "absl/status/statusor.h"

namespace troupe {

// `what` names the call that failed ("cudaMalloc of the send buffer").
absl::Status CudaToStatus(cudaError_t error, const std::string& what);
absl::Status NcclToStatus(ncclResult_t result, const std::string& what);

// Devices the CUDA runtime can use; Unavailable (with CUDA's reason) when there are none.
absl::StatusOr<int> CudaDeviceCount();
// "2.28.3" — the NCCL library actually loaded.
std::string NcclVersionString();

}  // namespace troupe
