#include "src/raylet/object_data_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/raylet/object_data_protocol.h"

namespace troupe {
namespace {

// A listening socket on host:port, and the port it got.
absl::StatusOr<std::pair<int, int>> Listen(const std::string& host, int port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const std::string where = absl::StrCat(host, ":", port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints,
                  &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve the bind address ", host));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool ok = fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  listen(fd, 128) == 0;
  const int error = errno;
  freeaddrinfo(found);
  if (!ok) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen for object data on ", where, ": ",
                                               std::strerror(error)));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::make_pair(fd, bound_port);
}

// The store's pin on one object, released on destruction.
class Pin {
 public:
  Pin(ObjectStore* store, const ObjectId& id) : store_(store), id_(id) {}
  ~Pin() {
    if (location_.ok()) store_->Release(id_);
  }
  absl::StatusOr<ObjectStore::Location>& Get() {
    location_ = store_->Get(id_);
    return location_;
  }

 private:
  ObjectStore* const store_;
  const ObjectId id_;
  absl::StatusOr<ObjectStore::Location> location_ = absl::UnknownError("not pinned");
};

}  // namespace

absl::StatusOr<std::unique_ptr<ObjectDataServer>> ObjectDataServer::Start(
    ObjectStore* store, ObjectDataServerOptions options) {
  // sendfile(2) and OpenSSL's writes to a peer that went away raise SIGPIPE, which would kill
  // the raylet: the process ignores it (writes fail with EPIPE instead).
  signal(SIGPIPE, SIG_IGN);
  auto listening = Listen(options.bind_address, options.port);
  if (!listening.ok()) return listening.status();
  std::unique_ptr<ObjectDataServer> server(
      new ObjectDataServer(store, std::move(options), listening->first, listening->second));
  server->accept_thread_ = std::thread([raw = server.get()] { raw->AcceptLoop(); });
  return server;
}

ObjectDataServer::ObjectDataServer(ObjectStore* store, ObjectDataServerOptions options,
                                   int listen_fd, int port)
    : store_(store), options_(std::move(options)), listen_fd_(listen_fd), port_(port) {}

ObjectDataServer::~ObjectDataServer() {
  Shutdown();
  close(listen_fd_);
}

void ObjectDataServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_ && !accept_thread_.joinable() && connections_.empty()) return;
    shutting_down_ = true;
    for (int fd : connections_) shutdown(fd, SHUT_RDWR);
  }
  shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  if (accept_thread_.joinable()) accept_thread_.join();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](absl::flat_hash_set<int>* open) { return open->empty(); }, &connections_));
}

int ObjectDataServer::connections() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(connections_.size());
}

int64_t ObjectDataServer::ranges_started() const {
  absl::MutexLock lock(&mu_);
  return ranges_started_;
}

void ObjectDataServer::AcceptLoop() {
  bool warned_full = false;
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
        if (errno == EMFILE || errno == ENFILE) absl::SleepFor(absl::Milliseconds(10));
        continue;
      }
      return;  // the listening socket was shut down
    }
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      close(fd);
      return;
    }
    if (static_cast<int>(connections_.size()) >= options_.max_connections) {
      if (!warned_full) {
        TROUPE_LOG(Warning) << "the object data port has " << connections_.size()
                            << " connections, its cap: closing new ones until some end";
        warned_full = true;
      }
      close(fd);
      continue;
    }
    warned_full = false;
    connections_.insert(fd);
    std::thread([this, fd] { RunConnection(fd); }).detach();
  }
}

void ObjectDataServer::RunConnection(int fd) {
  timeval receive = absl::ToTimeval(options_.request_timeout);
  timeval send = absl::ToTimeval(options_.send_timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &receive, sizeof(receive));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send, sizeof(send));
  std::unique_ptr<DataConnection> connection = DataConnection::Adopt(fd);
  absl::Status handshake =
      options_.tls ? connection->ServerHandshake(*options_.tls) : absl::OkStatus();
  if (handshake.ok()) {
    Serve(connection.get());
  } else {
    TROUPE_LOG(Info) << "object data connection refused: " << handshake.message();
  }
  // Forget the socket before it is closed, so Shutdown never touches a reused descriptor.
  {
    absl::MutexLock lock(&mu_);
    connections_.erase(fd);
  }
  connection.reset();
}

void ObjectDataServer::Serve(DataConnection* connection) {
  for (bool first = true;; first = false) {
    if (!first && !connection->WaitReadable(options_.idle_timeout)) return;
    char fixed[kDataRequestFixedBytes];
    bool eof = false;
    if (absl::Status read = connection->ReadExact(fixed, sizeof(fixed), &eof); !read.ok()) {
      if (!eof) TROUPE_LOG(Info) << "object data request not read: " << read.message();
      return;
    }
    if (!ServeRequest(connection, fixed)) return;
  }
}

bool ObjectDataServer::ServeRequest(DataConnection* connection, const char* fixed) {
  auto refuse = [connection](const absl::Status& status) {
    const std::string reply = EncodeDataError(status);
    (void)connection->WriteAll(reply.data(), static_cast<int64_t>(reply.size()));
    return false;  // the connection closes after an error
  };
  auto sizes = DecodeDataRequestFixed(fixed);
  if (!sizes.ok()) {
    TROUPE_LOG(Warning) << "object data port: " << sizes.status().message();
    return refuse(sizes.status());
  }
  std::string rest(sizes->token_bytes + sizes->id_bytes, '\0');
  if (absl::Status read = connection->ReadExact(rest.data(), static_cast<int64_t>(rest.size()));
      !read.ok()) {
    return refuse(absl::InvalidArgumentError("a truncated object data request"));
  }
  auto token = ClusterToken::Parse(rest.substr(0, sizes->token_bytes));
  if (!token.ok() || !options_.token.Matches(*token)) {
    TROUPE_LOG(Warning) << "object data port: a request with a wrong cluster token refused";
    return refuse(absl::UnauthenticatedError(
        "wrong cluster token: this raylet belongs to another cluster (or the token is stale)"));
  }
  auto id = ObjectId::FromBinary(rest.substr(sizes->token_bytes));
  if (!id.ok()) return refuse(absl::InvalidArgumentError(id.status().message()));
  Pin pin(store_, *id);
  auto& location = pin.Get();
  if (!location.ok()) {
    return refuse(absl::NotFoundError(
        absl::StrCat("object ", id->Hex(), " is not in this node's store")));
  }
  const int64_t size = location->size;
  if (sizes->offset < 0 || sizes->offset > size || sizes->length < 0) {
    return refuse(absl::OutOfRangeError(absl::StrCat("bytes [", sizes->offset, ", +", sizes->length,
                                                     ") are outside object ", id->Hex(), " (",
                                                     size, " bytes)")));
  }
  // As over gRPC (ObjectManager::ServeObject): a range reaching past the end is cut at the end
  // (a first pull asks for one chunk before it knows the size); the header says how much comes.
  const int64_t length = sizes->length == 0 ? size - sizes->offset
                                            : std::min(sizes->length, size - sizes->offset);
  const std::string header = EncodeDataRangeHeader(
      {size, length,
       location->owner.worker_id.IsNil() ? "" : location->owner.worker_id.Binary(),
       location->owner.node_id.IsNil() ? "" : location->owner.node_id.Binary()});
  absl::Status sent = SendRange(connection, location->path, sizes->offset, length, header);
  if (!sent.ok()) {
    TROUPE_LOG(Info) << "object data range of " << id->Hex() << " broke off: " << sent.message();
  }
  return sent.ok();
}

absl::Status ObjectDataServer::SendRange(DataConnection* connection, const std::string& path,
                                         int64_t offset, int64_t length,
                                         const std::string& header) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    absl::Status error = absl::InternalError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    const std::string reply = EncodeDataError(error);
    (void)connection->WriteAll(reply.data(), static_cast<int64_t>(reply.size()));
    return error;
  }
  {
    absl::MutexLock lock(&mu_);
    ++ranges_started_;
  }
  absl::Status status = connection->WriteAll(header.data(), static_cast<int64_t>(header.size()));
  if (options_.testing_send_delay == absl::ZeroDuration()) {
    if (status.ok()) status = connection->SendFile(fd, offset, length);
  } else {
    constexpr int64_t kSlice = 1 << 20;
    for (int64_t done = 0; status.ok() && done < length; done += kSlice) {
      absl::SleepFor(options_.testing_send_delay);
      status = connection->SendFile(fd, offset + done, std::min(kSlice, length - done));
    }
  }
  close(fd);
  return status;
}

}  // namespace troupe
