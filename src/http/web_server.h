// WebServer: the head's HTTP/1.1 server on Boost.Beast (Debian's libboost-dev, header-only),
// serving a Router (router.h) over plain TCP or TLS (Boost.Asio SSL with OpenSSL) on one port:
// keep-alive requests, whole and chunked (streamed) responses, and WebSocket upgrades on the
// Router's WebSocket routes, Beast doing all framing, masking, ping/pong and close handshakes.
//
// Every request passes `admit` first (the token and cross-site checks), the upgrade request of a
// WebSocket included; `observe` sees each finished request (metrics). Limits: 8 KiB of headers,
// `max_body_bytes` of body (413 past it), 64 KiB frames from a WebSocket client (closed with
// 1009 "message too big" past it), at most `max_connections` open connections (503 past it),
// and timeouts on every read and write, so no client can hold a thread forever.
//
// Threads: Serve runs the accept loop on the caller's thread; each connection gets its own thread
// (with its own io_context, so handlers may block) that ends with the connection. Stop is
// thread-safe; Serve returns once the accept loop and every connection thread have ended
// (open WebSockets and streams are told to finish at their next step).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "src/http/router.h"

namespace troupe::http {

struct WebServerOptions {
  std::string bind = "127.0.0.1";
  int port = 0;
  // PEM certificate chain and key: serve HTTPS. Both empty: plain HTTP.
  std::string cert_path, key_path;
  int64_t max_body_bytes = 1 << 20;
  int max_connections = 256;
  // Admission before routing: a response to send instead (401, 403), or nullopt.
  std::function<std::optional<HttpResponse>(const HttpRequest&)> admit;
  // Called once per finished request with its status and duration (101 for a WebSocket, timed
  // to its close).
  std::function<void(const HttpRequest&, int status, double seconds)> observe;
};

class WebServer {
 public:
  // `router` is borrowed and must outlive the server.
  WebServer(WebServerOptions options, const Router* router);
  ~WebServer();
  WebServer(const WebServer&) = delete;
  WebServer& operator=(const WebServer&) = delete;

  // Loads the TLS files (FailedPrecondition if they do not load) and binds the port
  // (Unavailable if taken).
  absl::Status Bind();
  // The bound port (after Bind; useful with port 0).
  int port() const { return port_; }
  // Accepts and serves until Stop. After Bind.
  void Serve();
  // Makes Serve return. Thread-safe, idempotent; fine before Serve.
  void Stop();
  // True once Stop was called: long-running handlers (streams, WebSockets) end at their next step.
  bool stopping() const { return stopping_; }

 private:
  struct Impl;
  struct Accepted;  // a connection's socket and io_context
  template <typename Stream>
  class Connection;

  void AcceptNext();
  // Runs on the connection's own thread: from the TLS handshake to the close.
  void RunConnection(Accepted& accepted);
  // A connection thread starts (false: too many) and ends.
  bool Register(int fd);
  void ThreadEnded();
  // Called before the connection's socket closes, so Stop never shuts a reused descriptor.
  void Forget(int fd);

  const WebServerOptions options_;
  const Router* const router_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  // The open connections' sockets: Stop shuts their reading side so idle ones end at once.
  std::set<int> open_fds_ ABSL_GUARDED_BY(mu_);
  int threads_ ABSL_GUARDED_BY(mu_) = 0;  // connection threads still running
};

}  // namespace troupe::http
