// Starting Troupe daemons (GCS, raylet) as detached background processes of this executable,
// and waiting for them to become ready. Stateless; not thread-safe (fork).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace troupe {

// Runs this same executable with `args` in a new session (immune to the terminal's signals),
// stdin from /dev/null and stdout/stderr appended to `log_path`. Returns the child's pid.
absl::StatusOr<int> SpawnDaemon(const std::vector<std::string>& args, const std::string& log_path);

// Polls `ready` every 50 ms until it returns OK. Fails if the process exits first or `timeout`
// passes; the error quotes the last lines of `log_path` so the user sees why.
absl::Status WaitUntilReady(int pid, const std::string& what, const std::string& log_path,
                            absl::Duration timeout, const std::function<absl::Status()>& ready);

// OK once something accepts TCP connections at host:port.
absl::Status TcpConnectable(const std::string& address);

// The last `lines` lines of a file ("" if unreadable).
std::string TailFile(const std::string& path, int lines);

}  // namespace troupe
