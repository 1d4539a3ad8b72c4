// Starting gRPC servers and answering calls. Every Troupe daemon serves through StartGrpcServer
// (port reuse off, so a second daemon on the same port fails loudly) and answers unary calls
// through Respond/RespondAsync, which check the cluster token before any handler runs.
// Thread-safety: the helpers are stateless; handlers run on gRPC's callback threads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/rpc/auth.h"
#include "src/rpc/grpc_status.h"
#include "src/rpc/rpc_latency.h"

namespace troupe {

// Listens on host:port (port 0: any free port, reported in *bound_port) and serves `services`,
// with TLS when this process uses it (transport_security.h).
// Fails with a message that names the address and, for a taken port, says what to do.
// With `latencies`, every call's server-side latency is recorded there, per method.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const std::string& host, int port, const std::vector<grpc::Service*>& services,
    int* bound_port, RpcLatencies* latencies = nullptr);

// OK if host:port can be bound right now; otherwise Unavailable saying why and what to do.
absl::Status CheckPortAvailable(const std::string& host, int port);

// Answers a unary call synchronously: checks the token, then runs `handler` (absl::Status()).
template <typename Handler>
grpc::ServerUnaryReactor* Respond(grpc::CallbackServerContext* context,
                                  const TokenAuthenticator& auth, Handler&& handler) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status status = auth.Check(*context);
  if (status.ok()) status = ToGrpcStatus(handler());
  reactor->Finish(status);
  return reactor;
}

// Answers a unary call later: checks the token, then gives `handler` a `done(absl::Status)` to
// call exactly once, from any thread, when the reply message is filled in.
template <typename Handler>
grpc::ServerUnaryReactor* RespondAsync(grpc::CallbackServerContext* context,
                                       const TokenAuthenticator& auth, Handler&& handler) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status status = auth.Check(*context);
  if (!status.ok()) {
    reactor->Finish(status);
    return reactor;
  }
  handler([reactor](const absl::Status& result) { reactor->Finish(ToGrpcStatus(result)); });
  return reactor;
}

struct ChannelOptions {
  // A TCP connection of its own: by default, channels to one address with the same settings
  // share one connection. Bulk transfers spread over several connections with this.
  bool own_connection = false;
};

// A channel to host:port: TLS verified against the cluster CA when this process uses TLS (see
// transport_security.h), else plaintext; the token authenticates the caller either way.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const ChannelOptions& options = {});

}  // namespace troupe
