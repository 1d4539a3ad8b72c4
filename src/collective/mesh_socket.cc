#include "src/collective/mesh_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace troupe::collective::mesh_socket {

std::string Errno(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

int MillisUntil(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Writes all of `data` to a non-blocking socket before `deadline`.
absl::Status WriteAll(int fd, const std::string& data, absl::Time deadline) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += n;
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return absl::UnavailableError(Errno("send"));
    pollfd entry{fd, POLLOUT, 0};
    if (poll(&entry, 1, MillisUntil(deadline)) == 0) {
      return absl::DeadlineExceededError("timed out sending");
    }
  }
  return absl::OkStatus();
}

std::string Frame(const std::string& message) {
  const uint32_t size = message.size();
  std::string out(reinterpret_cast<const char*>(&size), 4);
  return out + message;
}

// Takes one whole frame off the front of `buffer`, if there is one.
std::optional<std::string> TakeFrame(std::string* buffer) {
  if (buffer->size() < 4) return std::nullopt;
  uint32_t size;
  std::memcpy(&size, buffer->data(), 4);
  if (buffer->size() < 4 + size) return std::nullopt;
  std::string message = buffer->substr(4, size);
  buffer->erase(0, 4 + size);
  return message;
}

// Reads one frame from a socket (used while connecting, before a peer has a Peer entry). Reads
// exactly one frame, never into the next: what follows belongs to the Peer's buffer.
absl::StatusOr<std::string> ReadFrame(int fd, absl::Time deadline) {
  std::string buffer;
  size_t want = 4;
  while (buffer.size() < want) {
    char chunk[512];
    ssize_t n = recv(fd, chunk, std::min(sizeof(chunk), want - buffer.size()), 0);
    if (n > 0) {
      buffer.append(chunk, n);
      if (buffer.size() == 4 && want == 4) {
        uint32_t size;
        std::memcpy(&size, buffer.data(), 4);
        if (size > (1 << 20)) return absl::InvalidArgumentError("oversized control message");
        want = 4 + size;
      }
      continue;
    }
    if (n == 0) return absl::UnavailableError("connection closed");
    if (errno != EAGAIN && errno != EINTR) return absl::UnavailableError(Errno("recv"));
    pollfd entry{fd, POLLIN, 0};
    if (poll(&entry, 1, MillisUntil(deadline)) == 0) {
      return absl::DeadlineExceededError("timed out waiting for an answer");
    }
  }
  return buffer.substr(4);
}

absl::StatusOr<int> ConnectTcp(const std::string& address, absl::Time deadline) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError("bad address " + address);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError("bad address " + address);
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(Errno("socket"));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno != EINPROGRESS) {
    close(fd);
    return absl::UnavailableError(Errno("connect"));
  }
  pollfd entry{fd, POLLOUT, 0};
  int error = 0;
  socklen_t length = sizeof(error);
  if (poll(&entry, 1, MillisUntil(deadline)) != 1 ||
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", address, ": ",
                                               std::strerror(error ? error : ETIMEDOUT)));
  }
  SetNoDelay(fd);
  return fd;
}

}  // namespace troupe::collective::mesh_socket
