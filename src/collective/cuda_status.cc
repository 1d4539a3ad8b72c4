#include "src/collective/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace troupe {

absl::Status CudaToStatus(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": CUDA error ", static_cast<int>(error), " (",
                                     cudaGetErrorName(error), "): ", cudaGetErrorString(error));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
      return absl::InvalidArgumentError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status NcclToStatus(ncclResult_t result, const std::string& what) {
  if (result == ncclSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": NCCL error ", static_cast<int>(result), ": ",
                                     ncclGetErrorString(result));
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(message);
    case ncclInProgress:
      return absl::DeadlineExceededError(message);
    default:
      return absl::InternalError(message);
  }
}

std::string CudaVersionString(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

absl::Status ClassifyCudaVersions(int driver_version, int runtime_version) {
  if (driver_version <= 0) {
    return absl::UnavailableError(
        "no GPU driver: cudaDriverGetVersion reports none installed (libcuda.so not found)");
  }
  // Within a major version CUDA's minor version compatibility lets an older driver run a newer
  // runtime; across major versions it cannot.
  if (driver_version / 1000 < runtime_version / 1000) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the GPU driver supports CUDA ", CudaVersionString(driver_version),
        ", this build needs CUDA ", CudaVersionString(runtime_version),
        " (its CUDA runtime): install a newer NVIDIA driver, or build against an older toolkit"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> CudaDeviceCount() {
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (auto status = CudaToStatus(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
      !status.ok()) {
    return status;
  }
  if (auto status = ClassifyCudaVersions(driver, runtime); !status.ok()) return status;
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorInsufficientDriver) {
    return absl::FailedPreconditionError(absl::StrCat(
        CudaToStatus(error, "cudaGetDeviceCount").message(), " (driver supports CUDA ",
        CudaVersionString(driver), ", this build needs CUDA ", CudaVersionString(runtime), ")"));
  }
  if (error != cudaSuccess) {
    // cudaErrorNoDevice and the like: no usable GPU here. Anything else is a broken setup.
    absl::Status status = CudaToStatus(error, "cudaGetDeviceCount");
    if (error == cudaErrorNoDevice) return absl::UnavailableError(status.message());
    return absl::FailedPreconditionError(status.message());
  }
  if (count == 0) return absl::UnavailableError("the CUDA runtime sees no GPU");
  return count;
}

std::string NcclVersionString() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return absl::StrCat(version / 10000, ".", (version / 100) % 100, ".", version % 100);
}

}  // namespace troupe
