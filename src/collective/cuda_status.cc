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

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  if (absl::Status status = CudaToStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
      !status.ok()) {
    return absl::UnavailableError(status.message());
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
