// Converts the core worker's errors into the API's typed exceptions (troupe/errors.h): the one
// place where absl::Status and GetResult errors become C++ exceptions for users.
// Stateless; thread-safe.
#pragma once

#include "absl/status/status.h"
#include "src/core_worker/core_worker.h"

namespace troupe::internal {

// ResourceExhausted -> ObjectStoreFullError, DeadlineExceeded -> GetTimeoutError, else
// TroupeError; the message is the status's.
[[noreturn]] void ThrowFor(const absl::Status& status);
// An object that holds an error: TaskError (the remote exception), TaskCancelledError,
// ObjectLostError (OwnerDiedError, ObjectReconstructionFailedError), ActorDiedError or
// TaskFailedError.
[[noreturn]] void ThrowFor(const GetResult& result);

}  // namespace troupe::internal
