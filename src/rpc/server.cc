#include "src/rpc/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace troupe {
namespace {

// Why binding host:port fails, for a clear message (gRPC only says that it failed).
std::string ExplainBindFailure(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::strerror(errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string reason = "gRPC could not bind it";
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    reason = "not an IPv4 address of this machine";
  } else if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    reason = errno == EADDRINUSE
                 ? "the port is already in use (another Troupe head? run `troupe stop`, or pick "
                   "another port with --port)"
                 : std::strerror(errno);
  }
  close(fd);
  return reason;
}

}  // namespace

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const std::string& host, int port, const std::vector<grpc::Service*>& services,
    int* bound_port) {
  grpc::ServerBuilder builder;
  // gRPC enables SO_REUSEPORT by default, which would let two heads share a port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(512 << 20);
  builder.SetMaxSendMessageSize(512 << 20);
  const std::string address = absl::StrCat(host, ":", port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), bound_port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ", ExplainBindFailure(host, port)));
  }
  return server;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(512 << 20);
  args.SetMaxSendMessageSize(512 << 20);
  // Reconnect quickly after a peer restarts (the default backoff grows to two minutes).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

}  // namespace troupe
