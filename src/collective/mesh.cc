#include "src/collective/mesh.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/collective/mesh_socket.h"

namespace troupe::collective {
namespace {

using mesh_socket::ConnectTcp;
using mesh_socket::Errno;
using mesh_socket::Frame;
using mesh_socket::MillisUntil;
using mesh_socket::ReadFrame;
using mesh_socket::SetNoDelay;
using mesh_socket::SetNonBlocking;
using mesh_socket::WriteAll;

constexpr char kPeerPayload[] = "troupe.collective/peer";
constexpr absl::Duration kReportCheckInterval = absl::Milliseconds(100);
constexpr int kAcceptSliceMs = 100;

std::string RandomHex(int bytes) {
  std::random_device device;
  std::string out;
  for (int i = 0; i < bytes; ++i)
    absl::StrAppend(&out, absl::Hex(device() & 0xff, absl::kZeroPad2));
  return out;
}

constexpr char kShmDir[] = "/dev/shm";
constexpr char kFailed[] = "FAILED";  // a rank key's value once that member gave up joining

// The shared-memory domain: processes whose /dev/shm is the same filesystem. Two processes can
// share a kernel (same boot id) and still see different /dev/shm mounts (containers, pods): the
// tmpfs's device number tells those apart, since every tmpfs mount instance gets its own
// anonymous device and a bind mount of one keeps it. Equal domains are only a hint: a member
// proves it by opening the peer's inbox and finding the peer's nonce in it (MapPeerInbox), and
// falls back to TCP when it cannot. "" when this process has no usable /dev/shm.
std::string DetectShmDomain() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(in, boot_id);
  struct stat shm;
  if (boot_id.empty() || stat(kShmDir, &shm) != 0) return "";
  return absl::StrCat(boot_id, "/dev:", absl::Hex(shm.st_dev));
}

int Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return static_cast<int>(
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0));
}

// --- Shared memory -------------------------------------------------------------------------

// Inbox layout: [doorbell: 64 B][ring states: 128 B per sender][page-aligned data, one ring per
// sender]. The ring from sender s lives in the receiver's inbox at index s. The ring algorithms
// stream from rank - 1, which gets the big ring; the others carry small messages (and the
// scatter/gather steps of broadcast and reduce, which still stream through a smaller ring).
struct alignas(64) RingState {
  std::atomic<uint64_t> written{0};  // bytes the sender has put in, ever
  char pad1[56];
  std::atomic<uint64_t> read{0};  // bytes the receiver has taken out, ever
  char pad2[56];
};
static_assert(sizeof(RingState) == 128);

constexpr size_t kSmallRingBytes = 256 << 10;

struct InboxLayout {
  int receiver, world_size;
  size_t big_ring;

  size_t RingBytes(int sender) const {
    return sender == (receiver + world_size - 1) % world_size ? big_ring
                                                              : std::min(big_ring, kSmallRingBytes);
  }
  size_t DataOffset(int sender) const {
    size_t offset = (64 + sizeof(RingState) * world_size + 4095) / 4096 * 4096;
    for (int s = 0; s < sender; ++s) offset += RingBytes(s);
    return offset;
  }
  size_t Size() const { return DataOffset(world_size); }
};

}  // namespace

struct Mesh::Inbox {
  std::atomic<uint32_t> seq;       // rung by peers after they change a ring this member uses
  std::atomic<uint32_t> sleepers;  // > 0 while this member sleeps on seq
  char owner[48];                  // the owner's nonce: peers check they mapped the right file

  RingState* ring(int sender) {
    return reinterpret_cast<RingState*>(reinterpret_cast<char*>(this) + 64) + sender;
  }
  char* data(const InboxLayout& layout, int sender) {
    return reinterpret_cast<char*>(this) + layout.DataOffset(sender);
  }
  void Ring() {
    seq.fetch_add(1);
    if (sleepers.load() > 0) Futex(&seq, FUTEX_WAKE, INT_MAX, nullptr);
  }
};

namespace {

// A link over two shared-memory rings: ours (in our inbox, written by the peer) and the peer's
// (in its inbox, written by us). Both sides ring the other's doorbell after a change.
class ShmLink : public Link {
 public:
  ShmLink(RingState* in, char* in_data, size_t in_capacity, RingState* out, char* out_data,
          size_t out_capacity, Mesh::Inbox* peer)
      : in_(in),
        in_data_(in_data),
        in_capacity_(in_capacity),
        out_(out),
        out_data_(out_data),
        out_capacity_(out_capacity),
        peer_(peer) {}

  absl::StatusOr<size_t> Write(const char* data, size_t n, size_t unit) override {
    const uint64_t written = out_->written.load(std::memory_order_relaxed);
    const uint64_t space = out_capacity_ - (written - out_->read.load(std::memory_order_acquire));
    const size_t offset = written % out_capacity_;
    size_t take = std::min<uint64_t>({n, space, out_capacity_ - offset});
    take -= take % unit;
    if (take == 0) return 0;
    std::memcpy(out_data_ + offset, data, take);
    out_->written.store(written + take, std::memory_order_release);
    peer_->Ring();
    return take;
  }

  absl::StatusOr<std::pair<const char*, size_t>> Readable() override {
    const uint64_t read = in_->read.load(std::memory_order_relaxed);
    const uint64_t available = in_->written.load(std::memory_order_acquire) - read;
    const size_t offset = read % in_capacity_;
    return std::make_pair(in_data_ + offset, std::min<uint64_t>(available, in_capacity_ - offset));
  }

  void Consume(size_t n) override {
    in_->read.store(in_->read.load(std::memory_order_relaxed) + n, std::memory_order_release);
    peer_->Ring();
  }

 private:
  RingState* in_;
  char* in_data_;
  size_t in_capacity_;
  RingState* out_;
  char* out_data_;
  size_t out_capacity_;
  Mesh::Inbox* peer_;
};

class TcpLink : public Link {
 public:
  // `send_buffer` / `receive_buffer`: the socket's buffer sizes (0: the kernel's autotuning).
  TcpLink(int fd, int send_buffer, int receive_buffer) : fd_(fd), buffer_(kBufferBytes) {
    if (send_buffer > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof(int));
    if (receive_buffer > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(int));
  }

  // Any byte count, whole units or not: the receiver stages what it reduces in its own buffer
  // (Readable keeps a partial unit there), so nothing here waits to finish a unit. (Blocking
  // for the rest of a unit deadlocked rings whose members were all blocked sending.)
  absl::StatusOr<size_t> Write(const char* data, size_t n, size_t /*unit*/) override {
    if (n == 0) return 0;
    ssize_t sent = send(fd_, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EINTR) return 0;
      return absl::UnavailableError(Errno("send"));
    }
    return static_cast<size_t>(sent);
  }

  absl::StatusOr<std::pair<const char*, size_t>> Readable() override {
    if (begin_ == end_) begin_ = end_ = 0;
    if (end_ == buffer_.size() && begin_ > 0) {  // make room: move the remainder to the front
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ < buffer_.size()) {
      auto n = Receive(buffer_.data() + end_, buffer_.size() - end_);
      if (!n.ok()) return n.status();
      end_ += *n;
    }
    return std::make_pair(static_cast<const char*>(buffer_.data() + begin_), end_ - begin_);
  }

  void Consume(size_t n) override { begin_ += n; }

  absl::StatusOr<size_t> ReadInto(char* out, size_t n) override {
    const size_t buffered = std::min(n, end_ - begin_);  // what was read ahead goes first
    std::memcpy(out, buffer_.data() + begin_, buffered);
    Consume(buffered);
    if (buffered == n) return n;
    auto got = Receive(out + buffered, n - buffered);
    if (!got.ok()) return got.status();
    return buffered + *got;
  }

  int fd() const override { return fd_; }

 private:
  static constexpr size_t kBufferBytes = 512 << 10;

  // Up to `n` bytes that have arrived (0 if none yet).
  absl::StatusOr<size_t> Receive(char* out, size_t n) {
    ssize_t got = recv(fd_, out, n, MSG_DONTWAIT);
    if (got == 0) return absl::UnavailableError("connection closed");
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) return 0;
      return absl::UnavailableError(Errno("recv"));
    }
    return static_cast<size_t>(got);
  }

  int fd_;  // owned by the Mesh
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
};

}  // namespace

absl::StatusOr<size_t> Link::ReadInto(char* out, size_t n) {
  size_t total = 0;
  while (total < n) {
    auto readable = Readable();
    if (!readable.ok()) return readable.status();
    const size_t take = std::min(readable->second, n - total);
    if (take == 0) break;
    std::memcpy(out + total, readable->first, take);
    Consume(take);
    total += take;
  }
  return total;
}

absl::Status PeerError(absl::StatusCode code, int rank, const std::string& message) {
  absl::Status status(code, message);
  status.SetPayload(kPeerPayload, absl::Cord(std::to_string(rank)));
  return status;
}

int PeerOf(const absl::Status& status) {
  auto payload = status.GetPayload(kPeerPayload);
  int rank = -1;
  if (payload && absl::SimpleAtoi(std::string(*payload), &rank)) return rank;
  return -1;
}

Mesh::Mesh(MeshOptions options)
    : options_(std::move(options)),
      nonce_(absl::StrCat(getpid(), "-", RandomHex(12))),
      shm_domain_(options_.shm_domain.empty() ? DetectShmDomain() : options_.shm_domain),
      peers_(options_.world_size),
      links_(options_.world_size) {}

Mesh::~Mesh() {
  StopHeartbeats();
  for (Peer& peer : peers_) {
    if (peer.control_fd >= 0) close(peer.control_fd);
    if (peer.data_fd >= 0) close(peer.data_fd);
    if (peer.inbox != nullptr) munmap(peer.inbox, peer.inbox_size);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (inbox_ != nullptr) munmap(inbox_, inbox_size_);
  if (!inbox_path_.empty()) unlink(inbox_path_.c_str());
}

absl::StatusOr<std::unique_ptr<Mesh>> Mesh::Connect(const MeshOptions& options,
                                                    const KvAccess& kv) {
  std::unique_ptr<Mesh> mesh(new Mesh(options));
  const std::string key = options.key_prefix + "rank/" + std::to_string(options.rank);
  absl::Status status = mesh->Rendezvous(kv);
  if (status.ok()) {
    kv.del(key);  // it has served its purpose (and would mislead a retry)
    return mesh;
  }
  // Tell the others now rather than let them wait out the rendezvous timeout: those connected
  // already through the control connection, the rest through our key, which they poll while
  // they wait. The report stays until this rank's next attempt overwrites the key (or the job
  // ends); a declared group's next incarnation uses fresh keys.
  int cause = PeerOf(status);
  if (cause < 0) cause = options.rank;
  kv.put(key, absl::StrCat(kFailed, "\n", cause, "\n", status.message()));
  mesh->Abort(status);
  return status;
}

std::optional<absl::Status> Mesh::FailureReport(int peer, const std::string& value) {
  std::vector<std::string> fields = absl::StrSplit(value, absl::MaxSplits('\n', 2));
  if (fields.size() != 3 || fields[0] != kFailed) return std::nullopt;
  int cause = peer;
  if (!absl::SimpleAtoi(fields[1], &cause) || cause < 0) cause = peer;
  return PeerError(absl::StatusCode::kAborted, cause,
                   absl::StrCat("rank ", peer, " could not join: ", fields[2]));
}

absl::Status Mesh::CheckFailureReports(const KvAccess& kv) {
  const absl::Time now = absl::Now();
  if (now < next_report_check_) return absl::OkStatus();
  next_report_check_ = now + kReportCheckInterval;
  for (int peer = 0; peer < options_.world_size; ++peer) {
    if (peer == options_.rank || peers_[peer].control_fd >= 0) continue;
    std::optional<std::string> value = kv.get(options_.key_prefix + "rank/" + std::to_string(peer));
    if (!value) continue;
    if (std::optional<absl::Status> report = FailureReport(peer, *value)) return *report;
  }
  return absl::OkStatus();
}

absl::Status Mesh::CreateInbox() {
  inbox_path_ = absl::StrCat(kShmDir, "/troupe-coll-", nonce_);
  inbox_size_ = InboxLayout{options_.rank, options_.world_size, options_.ring_bytes}.Size();
  int fd = open(inbox_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    // No usable /dev/shm here (absent, read-only, not ours): every data link goes over TCP.
    inbox_path_.clear();
    shm_domain_.clear();
    return absl::OkStatus();
  }
  // Allocated now, so a full /dev/shm is this clear error rather than a SIGBUS mid-operation.
  if (int error = posix_fallocate(fd, 0, inbox_size_); error != 0) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate the ", inbox_size_ >> 10, " KiB shared-memory inbox in /dev/shm: ",
        std::strerror(error), " (free space there, or use Transport::kTcp)"));
  }
  void* map = mmap(nullptr, inbox_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return absl::InternalError(Errno("mapping the shared-memory inbox"));
  inbox_ = static_cast<Inbox*>(map);  // a fresh file: all zero, which is the initial state
  std::strncpy(inbox_->owner, nonce_.c_str(), sizeof(inbox_->owner) - 1);
  return absl::OkStatus();
}

absl::Status Mesh::Rendezvous(const KvAccess& kv) {
  const absl::Time deadline = absl::Now() + options_.rendezvous_timeout;
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, options_.listen_ip.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError("bad listen address " + options_.listen_ip);
  }
  socklen_t length = sizeof(addr);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 2 * options_.world_size) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    return absl::InternalError(Errno(("listen on " + options_.listen_ip).c_str()));
  }
  SetNonBlocking(listen_fd_);
  // From the first connection on: a peer waiting in the READY round hears from this member while
  // it still connects to others.
  StartHeartbeats();
  if (options_.data_links && !options_.force_tcp && options_.world_size > 1) {
    if (auto status = CreateInbox(); !status.ok()) return status;
  } else {
    shm_domain_.clear();
  }
  kv.put(
      options_.key_prefix + "rank/" + std::to_string(options_.rank),
      absl::StrCat(nonce_, "\n", shm_domain_, "\n", options_.listen_ip, ":", ntohs(addr.sin_port)));

  for (int peer = 0; peer < options_.rank; ++peer) {
    if (auto status = ConnectTo(peer, kv, deadline); !status.ok()) return status;
  }
  if (auto status = AcceptFrom(kv, deadline); !status.ok()) return status;
  if (auto status = ReadyRound(deadline); !status.ok()) return status;
  // Everyone has mapped our inbox: the file name is no longer needed.
  if (!inbox_path_.empty()) unlink(inbox_path_.c_str());
  inbox_path_.clear();
  close(listen_fd_);
  listen_fd_ = -1;

  for (int peer = 0; peer < options_.world_size; ++peer) {
    if (peer == options_.rank || !options_.data_links) continue;
    Peer& p = peers_[peer];
    if (p.inbox != nullptr) {
      const InboxLayout ours{options_.rank, options_.world_size, options_.ring_bytes};
      const InboxLayout theirs{peer, options_.world_size, options_.ring_bytes};
      links_[peer] = std::make_unique<ShmLink>(inbox_->ring(peer), inbox_->data(ours, peer),
                                               ours.RingBytes(peer), p.inbox->ring(options_.rank),
                                               p.inbox->data(theirs, options_.rank),
                                               theirs.RingBytes(options_.rank), p.inbox);
    } else {
      links_[peer] = std::make_unique<TcpLink>(p.data_fd, options_.tcp_send_buffer,
                                               options_.tcp_receive_buffer);
    }
  }
  return absl::OkStatus();
}

absl::Status Mesh::ConnectTo(int peer, const KvAccess& kv, absl::Time deadline) {
  const std::string key = options_.key_prefix + "rank/" + std::to_string(peer);
  absl::Duration backoff = absl::Milliseconds(2);
  std::string last_problem = "it has not published its address";
  auto retry = [&]() -> absl::Status {
    if (absl::Now() + backoff >= deadline) {
      return PeerError(
          absl::StatusCode::kDeadlineExceeded, peer,
          absl::StrCat("rank ", peer, " did not join within ",
                       absl::FormatDuration(options_.rendezvous_timeout), " (", last_problem, ")"));
    }
    // Whoever we wait for may be waiting for a member that gave up: fail with its reason now.
    if (auto report = CheckFailureReports(kv); !report.ok()) return report;
    if (auto gone = CheckConnectedPeers(); !gone.ok()) return gone;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(100));
    return absl::OkStatus();
  };
  while (true) {
    std::optional<std::string> value = kv.get(key);
    if (value) {
      if (std::optional<absl::Status> report = FailureReport(peer, *value)) return *report;
      std::vector<std::string> fields = absl::StrSplit(*value, '\n');
      if (fields.size() != 3) return absl::InternalError("malformed rendezvous key " + key);
      absl::Status attempt = TryConnect(peer, fields[0], fields[1], fields[2], deadline);
      if (attempt.ok() || !absl::IsUnavailable(attempt)) return attempt;
      last_problem = std::string(attempt.message());
    }
    if (auto status = retry(); !status.ok()) return status;
  }
}

absl::StatusOr<int> Mesh::Hello(int peer, const std::string& address, const std::string& peer_nonce,
                                const std::string& kind, bool shared_memory, absl::Time deadline,
                                bool* peer_wants_tcp) {
  // Not listening (yet, or any more: a key left by a dead member) is kUnavailable: retry.
  auto fd = ConnectTcp(address, std::min(deadline, absl::Now() + absl::Seconds(5)));
  if (!fd.ok()) return absl::UnavailableError(fd.status().message());
  const std::string hello =
      absl::StrCat("HELLO\n", options_.group, "\n", options_.rank, "\n", nonce_, "\n", peer_nonce,
                   "\n", kind, "\n", shared_memory ? 1 : 0);
  absl::Status sent = WriteAll(*fd, Frame(hello), deadline);
  auto answer = sent.ok() ? ReadFrame(*fd, deadline) : absl::StatusOr<std::string>(sent);
  if (answer.ok() && (*answer == "OK" || *answer == "OK tcp")) {
    if (peer_wants_tcp != nullptr) *peer_wants_tcp = *answer == "OK tcp";
    return *fd;
  }
  close(*fd);
  if (!answer.ok() && absl::IsDeadlineExceeded(answer.status())) {
    return PeerError(absl::StatusCode::kDeadlineExceeded, peer,
                     absl::StrCat("rank ", peer, " did not accept our connection within ",
                                  absl::FormatDuration(options_.rendezvous_timeout)));
  }
  return absl::UnavailableError(answer.ok() ? *answer : answer.status().message());
}

absl::Status Mesh::TryConnect(int peer, const std::string& peer_nonce, const std::string& domain,
                              const std::string& address, absl::Time deadline) {
  Peer& p = peers_[peer];
  bool shared_memory = options_.data_links && !shm_domain_.empty() && domain == shm_domain_;
  if (shared_memory) {
    if (absl::Status mapped = MapPeerInbox(peer, peer_nonce); !mapped.ok()) {
      NoteTcpFallback(peer, mapped);
      shared_memory = false;
    }
  }
  bool peer_wants_tcp = false;
  auto control =
      Hello(peer, address, peer_nonce, "control", shared_memory, deadline, &peer_wants_tcp);
  if (!control.ok()) {
    UnmapPeerInbox(peer);
    return control.status();
  }
  SetControlFd(peer, *control);
  if (peer_wants_tcp) {  // it could not open our inbox
    UnmapPeerInbox(peer);
    shared_memory = false;
  }
  if (!options_.data_links || shared_memory) return absl::OkStatus();
  auto data = Hello(peer, address, peer_nonce, "data", false, deadline, nullptr);
  if (!data.ok()) {
    const int control_fd = p.control_fd;
    SetControlFd(peer, -1);
    close(control_fd);
    return data.status();
  }
  p.data_fd = *data;
  return absl::OkStatus();
}

void Mesh::NoteTcpFallback(int peer, const absl::Status& why) {
  // Rare and worth knowing (a slower path than the configuration suggests): one line per peer.
  std::fprintf(stderr,
               "collective group '%s' rank %d: using TCP to rank %d, which looked like it shares "
               "/dev/shm with this process but does not (%s)\n",
               options_.group.c_str(), options_.rank, peer, std::string(why.message()).c_str());
}

absl::Status Mesh::AcceptFrom(const KvAccess& kv, absl::Time deadline) {
  // Control connections from every higher rank, plus a data connection from each of those that
  // does not share memory with us.
  int missing_control = options_.world_size - 1 - options_.rank;
  int missing_data = 0;
  while (missing_control > 0 || missing_data > 0) {
    pollfd entry{listen_fd_, POLLIN, 0};
    if (poll(&entry, 1, std::min(MillisUntil(deadline), kAcceptSliceMs)) == 0) {
      if (absl::Now() >= deadline) return AcceptTimeout();
      if (auto report = CheckFailureReports(kv); !report.ok()) return report;
      if (auto gone = CheckConnectedPeers(); !gone.ok()) return gone;
      continue;
    }
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    SetNoDelay(fd);
    auto hello = ReadFrame(fd, std::min(deadline, absl::Now() + absl::Seconds(10)));
    std::vector<std::string> fields;
    if (hello.ok()) fields = absl::StrSplit(*hello, '\n');
    int peer = -1;
    const bool control = fields.size() == 7 && fields[5] == "control";
    const bool data = fields.size() == 7 && fields[5] == "data";
    std::string refusal;
    if (fields.size() != 7 || fields[0] != "HELLO" || !absl::SimpleAtoi(fields[2], &peer) ||
        !(control || data)) {
      refusal = "not a collective hello";
    } else if (fields[1] != options_.group) {
      refusal = "this member belongs to group '" + options_.group + "'";
    } else if (fields[4] != nonce_) {
      refusal = "STALE: that address belongs to an earlier incarnation of the group";
    } else if (peer <= options_.rank || peer >= options_.world_size) {
      refusal = absl::StrCat("rank ", peer, " should not connect to rank ", options_.rank);
    } else if ((control ? peers_[peer].control_fd : peers_[peer].data_fd) >= 0) {
      refusal = absl::StrCat("rank ", peer, " is already connected (two members with one rank?)");
    }
    std::string answer = "OK";
    if (refusal.empty() && control && fields[6] == "1") {
      if (absl::Status mapped = MapPeerInbox(peer, fields[3]); !mapped.ok()) {
        NoteTcpFallback(peer, mapped);
        answer = "OK tcp";  // the peer opens data connections instead
      }
    }
    if (!refusal.empty()) {
      (void)WriteAll(fd, Frame(refusal), absl::Now() + absl::Seconds(1));
      close(fd);
      continue;
    }
    if (!WriteAll(fd, Frame(answer), deadline).ok()) {
      UnmapPeerInbox(peer);
      close(fd);
      continue;
    }
    if (control) {
      SetControlFd(peer, fd);
      --missing_control;
      if (options_.data_links && peers_[peer].inbox == nullptr) ++missing_data;
    } else {
      peers_[peer].data_fd = fd;
      --missing_data;
    }
  }
  return absl::OkStatus();
}

absl::Status Mesh::AcceptTimeout() {
  std::string absent;
  int first_absent = -1;
  for (int peer = options_.rank + 1; peer < options_.world_size; ++peer) {
    if (peers_[peer].control_fd < 0) {
      absl::StrAppend(&absent, absent.empty() ? "" : ", ", peer);
      if (first_absent < 0) first_absent = peer;
    }
  }
  return PeerError(absl::StatusCode::kDeadlineExceeded, first_absent,
                   absl::StrCat("rank(s) ", absent.empty() ? "?" : absent, " did not join within ",
                                absl::FormatDuration(options_.rendezvous_timeout)));
}

absl::Status Mesh::MapPeerInbox(int peer, const std::string& nonce) {
  const std::string path = absl::StrCat(kShmDir, "/troupe-coll-", nonce);
  const size_t size = InboxLayout{peer, options_.world_size, options_.ring_bytes}.Size();
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(Errno(("opening its inbox " + path).c_str()));
  struct stat file;
  if (fstat(fd, &file) != 0 || static_cast<size_t>(file.st_size) < size) {
    close(fd);
    return absl::UnavailableError("its inbox " + path + " is not the expected size");
  }
  void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return absl::UnavailableError(Errno("mapping its inbox"));
  Inbox* inbox = static_cast<Inbox*>(map);
  if (std::strncmp(inbox->owner, nonce.c_str(), sizeof(inbox->owner)) != 0) {
    munmap(map, size);
    return absl::UnavailableError("the file " + path + " here is not its inbox");
  }
  peers_[peer].inbox = inbox;
  peers_[peer].inbox_size = size;
  return absl::OkStatus();
}

void Mesh::UnmapPeerInbox(int peer) {
  Peer& p = peers_[peer];
  if (p.inbox != nullptr) munmap(p.inbox, p.inbox_size);
  p.inbox = nullptr;
  p.inbox_size = 0;
}

absl::Status Mesh::ReadyRound(absl::Time deadline) {
  for (int peer = 0; peer < options_.world_size; ++peer) {
    if (peer == options_.rank) continue;
    if (auto status = SendControl(peer, "READY"); !status.ok()) return status;
  }
  for (int peer = 0; peer < options_.world_size; ++peer) {
    if (peer == options_.rank) continue;
    auto message = ReceiveControl(peer, deadline);
    if (!message.ok()) return message.status();
    if (*message != "READY") return absl::InternalError("unexpected message " + *message);
  }
  return absl::OkStatus();
}

uint32_t Mesh::doorbell() const { return inbox_ ? inbox_->seq.load() : 0; }

absl::Status Mesh::WaitForProgress(uint32_t doorbell_seen, std::vector<pollfd>* fds,
                                   absl::Time deadline) {
  const absl::Time now = absl::Now();
  if (now >= deadline) return absl::DeadlineExceededError("deadline");
  const absl::Time until = std::min(deadline, now + kSlice);
  if (!fds->empty()) {
    // Waiting on sockets; if shared-memory links are busy too, look back at them every 1 ms.
    bool any_shared = false;
    for (const Peer& p : peers_) any_shared |= p.inbox != nullptr;
    const int timeout = any_shared ? std::min(1, MillisUntil(until)) : MillisUntil(until);
    poll(fds->data(), fds->size(), timeout);
  } else if (inbox_ != nullptr) {
    inbox_->sleepers.fetch_add(1);
    const absl::Duration left = until - now;
    timespec timeout = absl::ToTimespec(left);
    Futex(&inbox_->seq, FUTEX_WAIT, doorbell_seen, &timeout);
    inbox_->sleepers.fetch_sub(1);
  } else {
    absl::SleepFor(std::min(absl::Milliseconds(1), until - now));
  }
  return CheckPeers();
}

}  // namespace troupe::collective
