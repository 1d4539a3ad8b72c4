// MetricsHttpServer: a raylet's Prometheus endpoint. GET /metrics answers what `render` returns
// (the user metrics of this node's workers and drivers, metrics_aggregator.h), to callers that
// send the cluster token as `Authorization: Bearer <token>` (Prometheus' `authorization`
// setting); 401 without it, 404 for any other path. HTTPS with the node's certificate when the
// raylet has TLS files, plain HTTP otherwise. On cpp-httplib: the raylet links no client runtime,
// so not the head's WebServer.
// Owned by the Raylet. Threads: one accept loop and two handler threads of its own; `render` is
// called on those. Stops (and joins them) on destruction.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace troupe {

struct MetricsHttpServerOptions {
  std::string bind_address = "127.0.0.1";
  int port = 0;       // 0: any free port
  std::string token;  // the cluster token text
  // This node's certificate and key (PEM files): serve HTTPS. Both empty: plain HTTP.
  std::string cert_path, key_path;
};

class MetricsHttpServer {
 public:
  // Binds the port and starts serving. Unavailable if the port cannot be bound,
  // FailedPrecondition if the certificate does not load.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      MetricsHttpServerOptions options, std::function<std::string()> render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  bool tls() const { return tls_; }

 private:
  MetricsHttpServer(std::unique_ptr<httplib::Server> server, int port, bool tls);

  std::unique_ptr<httplib::Server> server_;
  const int port_;
  const bool tls_;
  std::atomic<bool> listen_returned_{false};
  std::thread thread_;
};

}  // namespace troupe
