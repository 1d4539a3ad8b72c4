#include "src/api/status_exceptions.h"

#include <string>

#include "src/core_worker/cluster_liveness.h"
#include "troupe/errors.h"

namespace troupe::internal {

void ThrowFor(const absl::Status& status) {
  if (IsClusterUnreachable(status)) throw ClusterUnreachableError(std::string(status.message()));
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      throw ObjectStoreFullError(std::string(status.message()));
    case absl::StatusCode::kDeadlineExceeded:
      throw GetTimeoutError(std::string(status.message()));
    case absl::StatusCode::kInvalidArgument:
      throw InvalidArgumentError(std::string(status.message()));
    default:
      throw TroupeError(std::string(status.message()));
  }
}

void ThrowFor(const GetResult& result) {
  switch (result.error) {
    case StoredObject::Error::kApplication: {
      const rpc::ReturnObject& detail = result.error_detail;
      throw TaskError(detail.function_name(), detail.exception_type(), detail.error_message(),
                      BytesToHex(detail.node_id()), detail.pid(), detail.remote_stack());
    }
    case StoredObject::Error::kCancelled:
      throw TaskCancelledError(result.error_message);
    case StoredObject::Error::kLost:
      throw ObjectLostError(result.error_message);
    case StoredObject::Error::kOwnerDied:
      throw OwnerDiedError(result.error_message);
    case StoredObject::Error::kReconstructionFailed:
      throw ObjectReconstructionFailedError(result.error_message);
    case StoredObject::Error::kActorDied:
      throw ActorDiedError(result.error_message);
    case StoredObject::Error::kClusterUnreachable:
      throw ClusterUnreachableError(result.error_message);
    case StoredObject::Error::kOutOfMemory:
      throw OutOfMemoryError(result.error_message);
    default:
      throw TaskFailedError(result.error_message);
  }
}

}  // namespace troupe::internal
