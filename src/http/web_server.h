// WebServer: the head's HTTP/1.1 server on Boost.Beast (Debian's libboost-dev, header-only),
// serving a Router (router.h) over plain TCP or TLS (Boost.Asio SSL with OpenSSL) on one port:
// keep-alive requests, whole and chunked (streamed) responses, and WebSocket upgrades on the
// Router's WebSocket routes, Beast doing all framing, masking, ping/pong and close handshakes.
//
// Every request passes `admit` once its head has arrived, before its body is read (the token and
// cross-site checks), the upgrade request of a WebSocket included; `observe` sees each finished
// request (metrics), labelled by the route it matched (HttpRequest::route). Limits: 8 KiB of
// headers, `max_body_bytes` of body (413 past it), 64 KiB frames from a WebSocket client (closed
// with 1009 "message too big" past it), at most `max_connections` open connections (503 past it),
// and timeouts on every read and write, so no client can hold a thread forever.
//
// Connections that have not yet sent a request with credentials (admit said `authenticated`) are
// "pending": each gets `head_timeout` for its TLS handshake and each request head, at most
// `max_pending_body_bytes` of body, and there may be at most `max_pending_connections` of them,
// `max_pending_per_address` from one client address. A new connection past either cap closes the
// oldest pending one (of its own address first) with a 503 that says why; past `max_connections`
// it closes the oldest pending one, and only when every open connection has credentials is the new
// one refused (503). So a flood of idle or slow connections without the token, from any number of
// addresses, cannot keep a client that sends its request at once from being served.
//
// Threads: Serve runs the accept loop on the caller's thread; each connection gets its own thread
// (with its own io_context, so handlers may block) that ends with the connection. Stop is
// thread-safe; Serve returns once the accept loop and every connection thread have ended
// (open WebSockets and streams are told to finish at their next step).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "src/http/router.h"

namespace troupe::http {

// What admission says about a request (its head: the body is not read yet).
struct Admission {
  std::optional<HttpResponse> refusal;  // a response to send instead (401, 403, 429)
  bool authenticated = false;           // it carries credentials: its connection is not pending
};

struct WebServerOptions {
  std::string bind = "127.0.0.1";
  int port = 0;
  // PEM certificate chain and key: serve HTTPS. Both empty: plain HTTP.
  std::string cert_path, key_path;
  int64_t max_body_bytes = 1 << 20;
  int max_connections = 256;
  // Pending connections (no request with credentials yet): see the top of this file.
  int max_pending_connections = 64;
  int max_pending_per_address = 16;
  std::chrono::milliseconds head_timeout{5000};
  int64_t max_pending_body_bytes = 64 << 10;
  // Admission before routing (request.route is set). Unset: every request is admitted, with
  // credentials.
  std::function<Admission(const HttpRequest&)> admit;
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
  // A connection from `address` starts: its slot id, or nullopt if every open connection has
  // credentials and there are max_connections of them. Closes pending connections to make room.
  std::optional<uint64_t> Register(int fd, const std::string& address);
  // Closes the oldest pending connection (from `address`, if given): false if there is none.
  bool EvictOldestPendingLocked(const std::string* address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropPendingLocked(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The connection sent a request with credentials: it is no longer pending.
  void Authenticated(uint64_t slot);
  // True if the connection was closed to make room for another.
  bool Evicted(uint64_t slot);
  void ThreadEnded();
  // Called before the connection's socket closes, so neither Stop nor an eviction ever shuts a
  // reused descriptor.
  void Forget(uint64_t slot);

  struct Slot {
    int fd;
    std::string address;
    bool pending = true;
  };

  const WebServerOptions options_;
  const Router* const router_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  // The open connections, oldest first: Stop shuts their reading side so idle ones end at once.
  std::map<uint64_t, Slot> slots_ ABSL_GUARDED_BY(mu_);
  uint64_t next_slot_ ABSL_GUARDED_BY(mu_) = 0;
  // Connections closed to make room whose threads have not ended yet.
  std::set<uint64_t> evicted_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> pending_by_address_ ABSL_GUARDED_BY(mu_);
  int threads_ ABSL_GUARDED_BY(mu_) = 0;  // connection threads still running
};

}  // namespace troupe::http
