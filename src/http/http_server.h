// The head's HTTP server (`troupe http-server`, src/cli/http_command.cc, started by
// `troupe start --head` on --http-port, default 8265): the jobs REST API shaped like Ray's
// (/api/version, /api/jobs/..., /api/packages/...), JSON state endpoints
// (/api/v0/{nodes,actors,placement_groups,jobs}, /api/cluster_status) and Prometheus /metrics.
// Every request needs `Authorization: Bearer <cluster token>` except /api/version; requests a
// browser makes from another site are refused on every method (request_guard.h); JSON bodies are
// capped at 1 MiB and package uploads at 100 MiB. See docs/jobs.md.
//
// The pieces: request_guard (auth, cross-site check, route labels), state_views (/api/v0/...),
// metrics_page + http_metrics (/metrics), log_tail (the job log stream); jobs::JobService
// (src/jobs) answers the jobs API. This file wires them to httplib routes. The server is a Troupe
// driver (it starts job supervisors as actors): RunHttpServer calls troupe::Init and Shutdown. Runs
// httplib's thread pool; everything it calls is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"

namespace httplib {
class Server;
}

namespace troupe {

class GcsClient;

struct HttpServerOptions {
  std::string bind = "127.0.0.1";
  int port = 8265;
  std::string gcs_address;
  std::string token;  // the cluster token text
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Joins the cluster as a driver and binds the port. Unavailable if the GCS cannot be reached
  // or the port is taken.
  absl::Status Start();
  // Answers requests until Stop(), then leaves the cluster (troupe::Shutdown). After Start.
  void Serve();
  // Makes Serve return. Thread-safe (e.g. from a signal-waiting thread); idempotent.
  void Stop();

 private:
  class Routes;
  const HttpServerOptions options_;
  std::unique_ptr<GcsClient> gcs_;
  std::unique_ptr<Routes> routes_;
  std::unique_ptr<httplib::Server> http_;
};

}  // namespace troupe
