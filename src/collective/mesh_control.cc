// Mesh's control connections (src/collective/mesh.h): whole messages to and from a peer, aborts,
// liveness (a closed connection, a peer gone silent) and the heartbeats that make silence mean
// something. Split out of mesh.cc, which keeps the rendezvous, the shared-memory inboxes and the
// data links. Threads: as for Mesh — reading is the operation's thread's; writes (operations,
// Abort, the heartbeat thread) take the peer's write_mu, one whole message at a time.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/collective/mesh.h"
#include "src/collective/mesh_socket.h"

namespace troupe::collective {
namespace {

using mesh_socket::Frame;
using mesh_socket::MillisUntil;
using mesh_socket::TakeFrame;
using mesh_socket::WriteAll;

constexpr char kClosedHow[] = "its connection closed (the process exited, or it left the group)";
// Heartbeats (see mesh.h): "HEARTBEAT\n<generation>", every hang_timeout / 5, at least this far
// apart.
constexpr char kHeartbeat[] = "HEARTBEAT\n";
constexpr absl::Duration kMinHeartbeatInterval = absl::Milliseconds(50);

bool IsAbort(const std::string& message) { return message.rfind("ABORT\n", 0) == 0; }
bool IsHeartbeat(const std::string& message) { return message.rfind(kHeartbeat, 0) == 0; }

}  // namespace

absl::Status Mesh::CheckConnectedPeers() {
  for (int peer = 0; peer < options_.world_size; ++peer) {
    Peer& p = peers_[peer];
    if (peer == options_.rank || p.control_fd < 0) continue;
    // Other messages (an early READY) stay queued for the READY round.
    const bool closed = ReadAvailable(p);
    for (const std::string& message : p.messages) {
      if (IsAbort(message)) return AbortError(peer, message);
    }
    if (closed) return PeerGone(peer, kClosedHow);
  }
  return absl::OkStatus();
}

absl::Status Mesh::SendControl(int peer, const std::string& message) {
  if (IsHeartbeat(message)) {
    return absl::InvalidArgumentError("a control message may not start with HEARTBEAT");
  }
  Peer& p = peers_[peer];
  absl::MutexLock lock(&p.write_mu);
  if (p.write_fd < 0) return PeerGone(peer, "its connection is closed");
  absl::Status status = WriteAll(p.write_fd, Frame(message), absl::Now() + absl::Seconds(30));
  if (!status.ok()) return PeerGone(peer, std::string(status.message()));
  return absl::OkStatus();
}

void Mesh::SetControlFd(int peer, int fd) {
  Peer& p = peers_[peer];
  absl::MutexLock lock(&p.write_mu);
  p.control_fd = fd;
  p.write_fd = fd;
  // The first heartbeat at once (the hello is done both ways, so it cannot be read as an answer):
  // a member that stops before the heartbeat thread's next round is judged all the same.
  if (fd >= 0 && HangRuleOn()) (void)WriteAll(fd, Heartbeat(), absl::Now() + kSlice);
}

std::string Mesh::Heartbeat() const { return Frame(absl::StrCat(kHeartbeat, options_.generation)); }

bool Mesh::ReadAvailable(Peer& peer) {
  char chunk[4096];
  bool got = false, closed = false;
  while (true) {
    ssize_t n = recv(peer.control_fd, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      peer.pending.append(chunk, n);
      got = true;
      continue;
    }
    closed = n == 0 || (errno != EAGAIN && errno != EINTR);
    break;
  }
  if (got) peer.heard = absl::Now();  // any bytes count, heartbeats or not
  while (std::optional<std::string> message = TakeFrame(&peer.pending)) {
    if (IsHeartbeat(*message)) {
      peer.sends_heartbeats = true;
    } else {
      peer.messages.push_back(std::move(*message));
    }
  }
  return closed;
}

absl::Status Mesh::CheckHeard(int peer, absl::Time now) const {
  const Peer& p = peers_[peer];
  if (!HangRuleOn() || !p.sends_heartbeats) return absl::OkStatus();
  const absl::Duration silent = now - p.heard;
  if (silent < options_.hang_timeout) return absl::OkStatus();
  return PeerError(
      absl::StatusCode::kDeadlineExceeded, peer,
      absl::StrCat("rank ", peer, " sent nothing for ",
                   absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(10))),
                   " (stopped, hung, or its link is cut): declared hung after hang_timeout ",
                   absl::FormatDuration(options_.hang_timeout)));
}

void Mesh::StartHeartbeats() {
  if (!HangRuleOn() || options_.world_size < 2) return;
  absl::MutexLock lock(&heartbeat_mu_);
  if (heartbeat_thread_.joinable() || heartbeat_stop_.HasBeenNotified()) return;
  heartbeat_thread_ = std::thread([this] { SendHeartbeats(); });
}

void Mesh::StopHeartbeats() {
  absl::MutexLock lock(&heartbeat_mu_);
  if (!heartbeat_thread_.joinable()) return;
  heartbeat_stop_.Notify();
  heartbeat_thread_.join();
}

void Mesh::SendHeartbeats() {
  const std::string beat = Heartbeat();
  const absl::Duration interval = std::max(options_.hang_timeout / 5, kMinHeartbeatInterval);
  do {
    for (int peer = 0; peer < options_.world_size; ++peer) {
      if (peer == options_.rank) continue;
      Peer& p = peers_[peer];
      absl::MutexLock lock(&p.write_mu);
      if (p.write_fd < 0) continue;
      // A socket without room means the peer has read nothing for a long while: skip it rather
      // than block the others' heartbeats (or leave half a message). With room (POLLOUT: a third
      // of the buffer free), the few bytes go in one send.
      pollfd entry{p.write_fd, POLLOUT, 0};
      if (poll(&entry, 1, 0) != 1 || (entry.revents & POLLOUT) == 0) continue;
      (void)WriteAll(p.write_fd, beat, absl::Now() + kSlice);
    }
  } while (!heartbeat_stop_.WaitForNotificationWithTimeout(interval));
}

absl::Status Mesh::AbortError(int peer, const std::string& message) {
  std::vector<std::string> fields = absl::StrSplit(message, absl::MaxSplits('\n', 2));
  int parsed = -1;
  const int cause =
      fields.size() == 3 && absl::SimpleAtoi(fields[1], &parsed) && parsed >= 0 ? parsed : peer;
  return PeerError(absl::StatusCode::kAborted, cause,
                   absl::StrCat("rank ", peer, " aborted the group: ",
                                fields.size() == 3 ? fields[2] : "no reason given"));
}

absl::StatusOr<std::optional<std::string>> Mesh::PollControl(int peer) {
  Peer& p = peers_[peer];
  if (p.control_fd < 0) return PeerGone(peer, "its connection is closed");
  const bool closed = ReadAvailable(p);
  if (!p.messages.empty()) {
    // An abort stays: later calls report the same one.
    if (IsAbort(p.messages.front())) return AbortError(peer, p.messages.front());
    std::optional<std::string> message = std::move(p.messages.front());
    p.messages.pop_front();
    return message;
  }
  if (closed) return PeerGone(peer, kClosedHow);
  return std::optional<std::string>();
}

absl::StatusOr<std::string> Mesh::ReceiveControl(int peer, absl::Time deadline) {
  while (true) {
    auto message = PollControl(peer);
    if (!message.ok()) return message.status();
    if (message->has_value()) return **message;
    if (auto silent = CheckHeard(peer, absl::Now()); !silent.ok()) return silent;
    // With hang detection, look at the peer's silence at least every kSlice.
    const int until_deadline = MillisUntil(deadline);
    const int wait = HangRuleOn() ? std::min<int>(until_deadline, absl::ToInt64Milliseconds(kSlice))
                                  : until_deadline;
    pollfd entry{peers_[peer].control_fd, POLLIN, 0};
    if (poll(&entry, 1, wait) == 0 && wait == until_deadline) {
      return PeerError(absl::StatusCode::kDeadlineExceeded, peer,
                       absl::StrCat("timed out waiting for rank ", peer));
    }
  }
}

absl::Status Mesh::CheckPeers() {
  if (aborted_) return absl::CancelledError("this member left the group");
  for (int peer = 0; peer < options_.world_size; ++peer) {
    if (peer == options_.rank) continue;
    Peer& p = peers_[peer];
    if (p.control_fd < 0) return PeerGone(peer, "its connection is closed");
    // Only aborts and hang-ups matter here; other messages stay queued for ReceiveControl.
    const bool closed = ReadAvailable(p);
    for (const std::string& message : p.messages) {
      if (IsAbort(message)) return AbortError(peer, message);
    }
    if (closed) return PeerGone(peer, kClosedHow);
  }
  // The hang rule, once every peer's bytes are read: time this member spent not reading (busy
  // between operations) counts against no one. A death or an abort above is the surer cause.
  const absl::Time now = absl::Now();
  for (int peer = 0; peer < options_.world_size; ++peer) {
    if (peer == options_.rank) continue;
    if (auto silent = CheckHeard(peer, now); !silent.ok()) return silent;
  }
  return absl::OkStatus();
}

absl::Status Mesh::PeerGone(int peer, const std::string& how) {
  return PeerError(absl::StatusCode::kUnavailable, peer,
                   absl::StrCat("rank ", peer, " is gone: ", how));
}

void Mesh::Abort(const absl::Status& status) {
  if (aborted_.exchange(true)) return;
  StopHeartbeats();  // none after the abort message, none into a shut connection
  int cause = PeerOf(status);
  if (cause < 0) cause = options_.rank;
  const std::string message = Frame(absl::StrCat("ABORT\n", cause, "\n", status.message()));
  for (int peer = 0; peer < options_.world_size; ++peer) {
    if (peer == options_.rank) continue;
    Peer& p = peers_[peer];
    absl::MutexLock lock(&p.write_mu);
    if (p.write_fd < 0) continue;
    (void)send(p.write_fd, message.data(), message.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    // FIN after the message (not a reset): peers read the reason, then see the close.
    shutdown(p.write_fd, SHUT_WR);
    p.write_fd = -1;
    if (p.data_fd >= 0) shutdown(p.data_fd, SHUT_RDWR);
  }
}

}  // namespace troupe::collective
