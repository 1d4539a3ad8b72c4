// The head's HTTP server (`troupe http-server`, src/cli/http_command.cc, started by
// `troupe start --head` on --http-port, default 8265): the jobs REST API shaped like Ray's
// (/api/version, /api/jobs/..., /api/packages/...), JSON state endpoints
// (/api/v0/{nodes,actors,placement_groups,jobs,train_runs}, /api/cluster_status), Prometheus
// /metrics and the web dashboard (/, /dashboard/...: dashboard.h). Every request needs
// `Authorization: Bearer <cluster token>` (or, from the dashboard's own page, its session cookie)
// except /api/version and the dashboard's page and login; requests a
// browser makes from another site are refused on every method (request_guard.h); JSON bodies are
// capped at 1 MiB and 64 levels of nesting (jobs/bounded_json.h), package uploads at 100 MiB. See
// docs/jobs.md.
//
// The pieces: web_server (Boost.Beast: HTTP/1.1, TLS, WebSocket) serving a router (router.h);
// request_guard (auth, cross-site check, route labels), state_views (/api/v0/...),
// metrics_page + http_metrics (/metrics), log_tail (the job log tail, WebSocket or chunked);
// jobs::JobService (src/jobs) answers the jobs API. This file adds the routes (AddRoutes) and
// runs them. The server is a Troupe driver (it starts job supervisors as actors): Start calls
// troupe::Init and Serve Shutdown. Runs a thread per connection, plus one watchdog thread that
// probes the GCS every second and makes Serve return (GCS lost) once it has not answered for
// `gcs_lost_timeout`, so a server whose head died frees its port instead of outliving the
// cluster. Everything it calls is thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace troupe {

class GcsClient;

namespace http {
class Router;
class WebServer;
}  // namespace http

struct HttpServerOptions {
  std::string bind = "127.0.0.1";
  int port = 8265;
  std::string gcs_address;
  std::string token;  // the cluster token text
  // The head's TLS files (src/tls/tls_files.h): serve HTTPS with its certificate. Empty: HTTP.
  // (The server's own cluster connection finds them like any driver: $TROUPE_TLS_DIR.)
  std::string tls_dir;
  // Serve returns Unavailable once the GCS has not answered for this long (the head is gone).
  absl::Duration gcs_lost_timeout = absl::Seconds(60);
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
  // Answers requests until Stop(), then leaves the cluster (troupe::Shutdown): OK. Or until the
  // GCS has been unreachable for gcs_lost_timeout: Unavailable, without leaving the cluster (the
  // caller should exit the process at once; there is no cluster to leave). After Start.
  absl::Status Serve();
  // Makes Serve return. Thread-safe (e.g. from a signal-waiting thread); idempotent.
  void Stop();

 private:
  class Routes;
  void WatchGcs();
  void StopWatchdog();

  const HttpServerOptions options_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // wakes and ends the watchdog
  std::atomic<bool> gcs_lost_{false};
  std::thread watchdog_;  // started by Start, joined by Serve or the destructor
  std::unique_ptr<GcsClient> gcs_;
  std::unique_ptr<Routes> routes_;
  std::unique_ptr<http::Router> router_;
  std::unique_ptr<http::WebServer> web_;
};

}  // namespace troupe
