// The socket plumbing under Mesh (src/collective/mesh.h): non-blocking TCP connect, whole
// writes with a deadline, and the control connection's framing (a 4-byte length, then the
// message). Split out of mesh.cc so that file keeps the group's logic (rendezvous, shared-memory
// inboxes, links, fail-fast). Internal to //src/collective.
// Stateless functions on file descriptors the caller owns; thread-safe as far as the descriptors'
// users are (one thread per descriptor at a time).
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace troupe::collective::mesh_socket {

// "what: strerror(errno)".
std::string Errno(const char* what);
// Milliseconds from now until `deadline`, clamped to [0, INT_MAX] (for poll).
int MillisUntil(absl::Time deadline);
void SetNonBlocking(int fd);
void SetNoDelay(int fd);
// Writes all of `data` to a non-blocking socket before `deadline`.
absl::Status WriteAll(int fd, const std::string& data, absl::Time deadline);
// `message` with its 4-byte length in front.
std::string Frame(const std::string& message);
// Takes one whole frame off the front of `buffer`, if there is one.
std::optional<std::string> TakeFrame(std::string* buffer);
// Reads exactly one frame from a socket (at most 1 MiB), never into the next.
absl::StatusOr<std::string> ReadFrame(int fd, absl::Time deadline);
// A connected non-blocking TCP socket (TCP_NODELAY) to "ip:port", or why not.
absl::StatusOr<int> ConnectTcp(const std::string& address, absl::Time deadline);

}  // namespace troupe::collective::mesh_socket
