// The connections between the members of a collective group, set up by rendezvous through the
// GCS KV:
//
//   1. each member listens on a TCP port, creates its shared-memory inbox (its nonce written in
//      it) and publishes "nonce, shared-memory domain, address" under
//      <job namespace>/collective/<group>/rank/<r>;
//   2. member r connects to every lower rank j, handing over the nonce it read for j; j accepts
//      only its current nonce, so a key left by an earlier incarnation of the group is refused
//      and re-read (never silently joined);
//   3. once all are connected (a READY round), each member unlinks its inbox file and deletes its
//      key: nothing is left behind in the KV or in /dev/shm.
// A member that fails to join replaces its key with "FAILED, cause, reason" and aborts the
// connections it has: members waiting for it poll the keys of those not yet connected and fail
// at once with its reason (naming it), instead of waiting out the rendezvous timeout.
//
// Per peer there is a control connection (aborts, liveness: a dead peer's socket closes) and a
// data Link: a shared-memory ring in the receiver's inbox when both share /dev/shm, else a
// second TCP connection. Sharing /dev/shm is decided per pair: equal domains (boot id
// and /dev/shm's device, see DetectShmDomain in mesh.cc), then proven by opening the peer's inbox
// and finding its nonce there; if either side cannot, the pair uses TCP. A member waits on its
// own futex doorbell, which peers ring when they put data in or take it out of a ring it uses.
//
// Hangs (MeshOptions::hang_timeout > 0): a member that stops (SIGSTOP, a frozen host, a link cut
// silently) keeps its sockets open, so nothing closes. Each member therefore sends every peer a
// small heartbeat over the control connection every hang_timeout / 5 (at least 50 ms apart),
// from a background thread: a member busy between operations keeps sending, a stopped one does
// not. Whatever arrives from a peer (heartbeat or not) counts as hearing from it. A member
// waiting in an operation (WaitForProgress, CheckPeers, ReceiveControl, so also the rendezvous'
// READY round) first reads what its peers sent — time it spent not reading counts against no one
// — and fails with PeerError(kDeadlineExceeded, r) when peer r has sent nothing for
// hang_timeout, exactly as if r had died. Only peers that have sent a heartbeat are judged (a
// member with hang detection off is never taken for hung). Heartbeats never reach
// ReceiveControl's callers. They carry the group's generation, for the record only: one from
// another generation cannot arrive, since each generation is a separate Mesh whose connections
// were made with its own nonces.
// Implemented in mesh.cc (rendezvous, inboxes, links) and mesh_control.cc (control connections,
// aborts, liveness, heartbeats).
// Thread-compatible: one operation at a time (the group serialises them); Abort may come from
// any thread. The heartbeat thread writes only whole messages, under the peer's write lock that
// every control write takes; Abort and ~Mesh stop it before the connections are shut.
#pragma once

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace troupe::collective {

// Errors that a member caused carry its rank (see PeerOf).
absl::Status PeerError(absl::StatusCode code, int rank, const std::string& message);
int PeerOf(const absl::Status& status);  // -1 when none

// Where rendezvous keys live and how to reach them (the GCS KV in production).
struct KvAccess {
  std::function<std::optional<std::string>(const std::string& key)> get;
  std::function<void(const std::string& key, const std::string& value)> put;
  std::function<void(const std::string& key)> del;
};

struct MeshOptions {
  std::string group;
  int world_size = 0;
  int rank = 0;
  std::string key_prefix;  // "collective/<group>/"
  std::string listen_ip;   // the address peers on other hosts reach us at
  bool data_links = true;  // false: control connections only (the NCCL backend)
  bool force_tcp = false;  // TCP data links even between members on one host
  size_t ring_bytes = 4 << 20;
  // TCP data links' socket buffers (SO_SNDBUF / SO_RCVBUF; the kernel doubles them), 0 for the
  // kernel's autotuning. Small buffers keep the bytes in flight, and so the pages the kernel
  // copies through, cache-resident: across network namespaces this cut CPU per byte ~13% against
  // autotuning (which grows the receive buffer to tcp_rmem's max, 32 MiB here). On links with a
  // large bandwidth-delay product (> ~256 KB) they would cap throughput: raise or zero them.
  int tcp_send_buffer = 128 << 10;
  int tcp_receive_buffer = 512 << 10;
  // The shared-memory domain to publish; "" detects it (tests set it to pretend a peer shares
  // /dev/shm when it does not).
  std::string shm_domain;
  absl::Duration rendezvous_timeout = absl::Minutes(5);
  // Hang detection (see the file comment): a peer silent this long while this member waits in an
  // operation fails it, naming the peer. 0: off (no heartbeats, no thread).
  absl::Duration hang_timeout = absl::ZeroDuration();
  // The group's generation (elastic groups; 0 otherwise), carried by heartbeats.
  uint64_t generation = 0;
};

// A byte stream to one peer. Writes and reads never block. Shared-memory links keep positions
// multiples of the unit the caller writes and reads in (the receiver reduces in place out of
// the ring); TCP links may take part of a unit (the receiver stages bytes in its own buffer).
class Link {
 public:
  virtual ~Link() = default;
  // Copies up to `n` bytes in (shared memory: rounded down to `unit`); returns how many were
  // taken.
  virtual absl::StatusOr<size_t> Write(const char* data, size_t n, size_t unit) = 0;
  // Contiguous readable bytes (possibly fewer than are buffered), without consuming them.
  virtual absl::StatusOr<std::pair<const char*, size_t>> Readable() = 0;
  virtual void Consume(size_t n) = 0;
  // Copies up to `n` readable bytes to `out` and consumes them (any count, not only whole
  // units: for plain copies). TCP links receive straight into `out`, saving a copy.
  virtual absl::StatusOr<size_t> ReadInto(char* out, size_t n);
  // TCP links: the socket, to poll when blocked. -1 for shared memory.
  virtual int fd() const { return -1; }
};

class Mesh {
 public:
  // Rendezvous with every other member; fails after options.rendezvous_timeout.
  static absl::StatusOr<std::unique_ptr<Mesh>> Connect(const MeshOptions& options,
                                                       const KvAccess& kv);
  ~Mesh();

  int rank() const { return options_.rank; }
  const std::string& group() const { return options_.group; }
  int world_size() const { return options_.world_size; }
  Link* link(int peer) { return links_[peer].get(); }
  bool shares_memory_with(int peer) const { return peers_[peer].inbox != nullptr; }

  // Control messages: a small message to one peer (rendezvous of backends, e.g. the NCCL id),
  // and receiving one before `deadline` (failing early if the peer dies, aborts or, with hang
  // detection, falls silent). Heartbeats are never returned; messages may not start with
  // "HEARTBEAT\n".
  absl::Status SendControl(int peer, const std::string& message);
  absl::StatusOr<std::string> ReceiveControl(int peer, absl::Time deadline);

  // Blocks until a doorbell ring, activity on `fds` (poll entries), 50 ms, or `deadline`. Checks
  // every peer's control connection: an error names the peer that died, aborted or hung.
  absl::Status WaitForProgress(uint32_t doorbell_seen, std::vector<pollfd>* fds,
                               absl::Time deadline);
  uint32_t doorbell() const;
  // Non-blocking liveness check of every peer (what WaitForProgress does between sleeps): a
  // closed connection or an abort names that peer (kUnavailable / kAborted); with hang
  // detection, so does a peer silent for hang_timeout (kDeadlineExceeded).
  absl::Status CheckPeers();

  // Tells every peer why this member gives up (they fail with `status`, naming its rank as the
  // cause unless it names another), stops the heartbeats and closes all connections.
  // Idempotent; may be called while another thread runs an operation, which then fails within
  // 50 ms.
  void Abort(const absl::Status& status);

  struct Inbox;  // a member's shared-memory segment: doorbell + one ring per sender

 private:
  struct Peer {
    // Set by the rendezvous (SetControlFd), fixed from then on; read by the operation's thread.
    int control_fd = -1;
    int data_fd = -1;
    Inbox* inbox = nullptr;  // the peer's inbox, mapped here (same host only)
    size_t inbox_size = 0;
    // Reading, by the operation's thread only:
    std::string pending;                      // control bytes read but not yet a whole message
    std::deque<std::string> messages;         // whole messages not yet taken (never heartbeats)
    absl::Time heard = absl::InfinitePast();  // when bytes from it were last read
    bool sends_heartbeats = false;            // one has arrived: the hang rule applies to it
    // Writing: one whole message at a time, from operations, Abort and the heartbeat thread.
    absl::Mutex write_mu;
    int write_fd ABSL_GUARDED_BY(write_mu) = -1;  // control_fd for writers; -1 after Abort
  };
  // The longest a wait goes without looking at the peers (WaitForProgress, ReceiveControl).
  static constexpr absl::Duration kSlice = absl::Milliseconds(50);

  explicit Mesh(MeshOptions options);
  absl::Status Rendezvous(const KvAccess& kv);
  absl::Status CreateInbox();
  absl::Status ConnectTo(int peer, const KvAccess& kv, absl::Time deadline);
  // One attempt at what the peer's key says; kUnavailable: stale or not ready yet, retry.
  absl::Status TryConnect(int peer, const std::string& peer_nonce, const std::string& domain,
                          const std::string& address, absl::Time deadline);
  // Opens one connection of `kind` ("control", "data") to the peer; the fd, once accepted.
  // *peer_wants_tcp: it could not open our inbox.
  absl::StatusOr<int> Hello(int peer, const std::string& address, const std::string& peer_nonce,
                            const std::string& kind, bool shared_memory, absl::Time deadline,
                            bool* peer_wants_tcp);
  absl::Status AcceptFrom(const KvAccess& kv, absl::Time deadline);
  absl::Status AcceptTimeout();
  // Maps the peer's inbox, checking the peer's nonce in it; kUnavailable when this process
  // cannot open it (a different /dev/shm).
  absl::Status MapPeerInbox(int peer, const std::string& nonce);
  void UnmapPeerInbox(int peer);
  void NoteTcpFallback(int peer, const absl::Status& why);
  // A failed member leaves "FAILED\n<cause rank>\n<reason>" under its key (see Connect).
  static std::optional<absl::Status> FailureReport(int peer, const std::string& value);
  // The first failure report of a member not connected yet (rate-limited: KV reads).
  absl::Status CheckFailureReports(const KvAccess& kv);
  // Members connected already that aborted (a failed join) or hung up, during the rendezvous.
  absl::Status CheckConnectedPeers();
  absl::Status ReadyRound(absl::Time deadline);
  absl::Status PeerGone(int peer, const std::string& how);
  // Reads whatever the peer's control connection has (noting when, and dropping heartbeats);
  // true if the peer closed it.
  static bool ReadAvailable(Peer& peer);
  // Records the peer's control connection (-1: none), for readers and writers; with hang
  // detection, sends the first heartbeat on it.
  void SetControlFd(int peer, int fd);
  // The hang rule for one peer, as of `now` (after reading what it sent).
  absl::Status CheckHeard(int peer, absl::Time now) const;
  bool HangRuleOn() const { return options_.hang_timeout > absl::ZeroDuration(); }
  void StartHeartbeats();
  void StopHeartbeats();
  void SendHeartbeats();          // the heartbeat thread
  std::string Heartbeat() const;  // the framed message
  static absl::Status AbortError(int peer, const std::string& message);
  // Parses a whole control message from the peer if one has arrived; aborts become errors.
  absl::StatusOr<std::optional<std::string>> PollControl(int peer);

  MeshOptions options_;
  std::string nonce_;
  std::string shm_domain_;  // "" when this member has no inbox (see DetectShmDomain)
  absl::Time next_report_check_ = absl::InfinitePast();
  int listen_fd_ = -1;
  std::string inbox_path_;
  Inbox* inbox_ = nullptr;  // our own: peers write into it
  size_t inbox_size_ = 0;
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<Link>> links_;
  std::atomic<bool> aborted_{false};  // Abort may come from another thread
  absl::Mutex heartbeat_mu_;          // starting and stopping the thread
  std::thread heartbeat_thread_ ABSL_GUARDED_BY(heartbeat_mu_);
  absl::Notification heartbeat_stop_;
};

}  // namespace troupe::collective
