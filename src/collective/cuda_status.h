// CUDA and NCCL at the boundary: their error codes become absl::Status here, once, so collective
// code above never sees a cudaError_t or ncclResult_t. Built only where the CUDA toolkit is
// present (see bazel/cuda.bzl). "No GPU driver" and "no GPU" are Unavailable (GPU tests skip);
// a driver too old for this build's CUDA runtime is FailedPrecondition (GPU tests fail: the
// machine has a GPU that this build cannot use). Stateless; thread-safe.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "absl/status/statusor.h"

namespace troupe {

// `what` names the call that failed ("cudaMalloc of the send buffer").
absl::Status CudaToStatus(cudaError_t error, const std::string& what);
absl::Status NcclToStatus(ncclResult_t result, const std::string& what);

// What cudaDriverGetVersion and cudaRuntimeGetVersion report (1000 * major + 10 * minor) says
// about this machine: OK; Unavailable "no GPU driver" when the driver version is 0 (no driver
// installed); FailedPrecondition naming both versions when the driver's CUDA major version is
// older than the runtime's ("the GPU driver supports CUDA 12.4, this build needs CUDA 13.0").
absl::Status ClassifyCudaVersions(int driver_version, int runtime_version);
// "13.0" for 13000.
std::string CudaVersionString(int version);

// Devices the CUDA runtime can use. Unavailable (with the reason) when there is no driver or no
// GPU; FailedPrecondition when the driver is too old for this build (see ClassifyCudaVersions).
absl::StatusOr<int> CudaDeviceCount();
// True for the statuses that mean "this machine has no GPU" (tests skip on these and fail on
// any other error of CudaDeviceCount).
inline bool IsNoGpu(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable;
}
// "2.28.3" — the NCCL library actually loaded.
std::string NcclVersionString();

}  // namespace troupe
