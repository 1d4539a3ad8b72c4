// A TCP port on 127.0.0.1 that nothing listens on right now, for tests that start servers.
// (Another process may take it before the caller binds it; tests accept that small race.)
// Stateless; thread-safe.
#pragma once

#include "absl/status/statusor.h"

namespace troupe::testing {

// Asks the kernel for a free ephemeral port on the loopback address.
absl::StatusOr<int> FreeLoopbackPort();
// FreeLoopbackPort(), or 0 when the kernel gave none (a server told to use 0 picks its own).
int PickFreePort();

}  // namespace troupe::testing
