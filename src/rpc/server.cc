#include "src/rpc/server.h"

#include <arpa/inet.h>
#include <grpc/grpc.h>
#include <grpcpp/channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "src/rpc/lazy_event_engine.h"
#include "src/rpc/transport_security.h"

namespace troupe {
namespace {

// Client keepalive: ping every kKeepaliveTimeMs while calls are in flight; a ping unanswered for
// kKeepaliveTimeoutMs closes the connection and fails its calls.
constexpr int kKeepaliveTimeMs = 10000;
constexpr int kKeepaliveTimeoutMs = 10000;

// Channel arguments every client channel of this process carries.
grpc::ChannelArguments BaseChannelArguments() {
  grpc::ChannelArguments args;
  // No client-idle filter: in gRPC 1.51 its idle timer is the only thing that starts gRPC's
  // EventEngine in our processes, and that engine is four threads (a poller, a pool of two, a
  // timer manager) in every worker process, where threads are what limits how many actors fit
  // on a machine (kernel.pid_max). Without it a channel stays connected while unused instead of
  // disconnecting after 30 idle minutes; our channels lead to peers we keep talking to, and a
  // dead peer's connection is closed anyway. INT_MAX is gRPC's "infinite" here.
  args.SetInt(GRPC_ARG_CLIENT_IDLE_TIMEOUT_MS, std::numeric_limits<int>::max());
  return args;
}

}  // namespace

absl::Status CheckPortAvailable(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  // Like gRPC, ignore connections lingering in TIME_WAIT: only a live listener is a conflict.
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string reason;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    reason = "not an IPv4 address (give one of this machine's addresses, or 0.0.0.0)";
  } else if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    reason = errno == EADDRINUSE
                 ? "the port is already in use (another Troupe head? run `troupe stop`, or pick "
                   "another port with --port)"
             : errno == EADDRNOTAVAIL ? "no network interface of this machine has that address"
                                      : std::strerror(errno);
  }
  close(fd);
  if (reason.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port, ": ", reason));
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const std::string& host, int port, const std::vector<grpc::Service*>& services,
    int* bound_port, RpcLatencies* latencies) {
  InstallLazyEventEngine();  // before gRPC makes its engine for this server
  grpc::ServerBuilder builder;
  if (latencies != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(latencies->InterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  // gRPC enables SO_REUSEPORT by default, which would let two heads share a port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Accept the clients' keepalive pings (MakeChannel), also during long calls that send no
  // data, instead of answering them with GOAWAY "too_many_pings".
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             kKeepaliveTimeMs / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.SetMaxReceiveMessageSize(512 << 20);
  builder.SetMaxSendMessageSize(512 << 20);
  const std::string address = absl::StrCat(host, ":", port);
  auto credentials = ServerCredentials();  // TLS when this process uses it
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(address, *credentials, bound_port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *bound_port == 0) {
    absl::Status why = CheckPortAvailable(host, port);
    if (!why.ok()) return why;
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  return server;
}

namespace {

// gRPC 1.51 runs callback-API completions on a shared "alternative" completion queue that is
// created when the first channel needs it and torn down when the last such channel goes away.
// Tearing it down while a callback still runs on it (a client dropped inside its own callback,
// or a driver that calls Init/Shutdown repeatedly) double-frees it. One channel that lives for
// the whole process and has made a callback call holds the queue until exit. It is a "lame"
// channel, whose calls fail at once: it never tries to connect (a refused connection would
// start a reconnect backoff timer, and with it gRPC's EventEngine threads:
// src/rpc/lazy_event_engine.h).
void PinCallbackQueue() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Kept (not freed) on purpose: the channel must outlive every other. A lame channel (gRPC's
    // own kind for "fails every call") needs no target, so nothing is parsed or logged either.
    grpc_init();  // the core channel is made before the C++ Channel that would initialize gRPC
    grpc_channel* lame =
        grpc_lame_client_channel_create("pin", GRPC_STATUS_UNAVAILABLE, "pins the callback queue");
    auto* channel = new std::shared_ptr<grpc::Channel>(grpc::CreateChannelInternal("", lame, {}));
    auto* stub = new grpc::GenericStub(*channel);
    auto* context = new grpc::ClientContext();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1));
    grpc::Slice empty("");
    auto* request = new grpc::ByteBuffer(&empty, 1);
    auto* response = new grpc::ByteBuffer();
    stub->UnaryCall(context, "/troupe.Pin/Pin", grpc::StubOptions(), request, response,
                    [](grpc::Status) {});
  });
}

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const ChannelOptions& options) {
  InstallLazyEventEngine();  // before gRPC makes its engine for this channel
  PinCallbackQueue();
  grpc::ChannelArguments args = BaseChannelArguments();
  args.SetMaxReceiveMessageSize(512 << 20);
  args.SetMaxSendMessageSize(512 << 20);
  // Reconnect quickly after a peer restarts (the default backoff grows to two minutes).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // Despite its name, gRPC core reads this as the minimum time one connection attempt gets to
  // finish its TCP and HTTP/2 handshake (MIN_CONNECT_TIMEOUT in gRPC's connection-backoff
  // design). At 100 ms a loaded machine failed handshakes with live peers ("connection attempt
  // timed out before receiving SETTINGS frame"), which surfaced as lost objects and unreachable
  // actors; a refused connection (dead peer) still fails at once, and calls carry deadlines.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  // Keepalive while calls are in flight: a peer that went silent (partition, frozen host) fails
  // its calls with UNAVAILABLE after about kKeepaliveTimeMs + kKeepaliveTimeoutMs instead of
  // never; the GCS's node-death notice is usually faster (docs/fault_tolerance.md).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // a long task sends no data
  if (options.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, ChannelCredentials(), args);
}

}  // namespace troupe
