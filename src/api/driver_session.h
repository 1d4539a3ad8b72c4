// Access to the driver's session for the internal hooks (runtime_hooks.cc): the session Init
// built and Shutdown tears down, defined in runtime.cc. Thread-safe.
#pragma once

#include <memory>

#include "src/api/core_worker_runtime.h"

namespace troupe::internal {

// The driver's runtime while Init has run and Shutdown has not (nullptr otherwise, and in
// worker mode). Holding it keeps the core worker alive, not running.
std::shared_ptr<CoreWorkerRuntime> DriverRuntime();

}  // namespace troupe::internal
