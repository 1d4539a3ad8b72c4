// ObjectDataServer: the raylet's object data port. Other raylets' DataObjectPullers read byte
// ranges of this node's sealed objects here, off the gRPC path (object_data_protocol.h has the
// wire format): plaintext ranges go with sendfile(2) straight from the object's file in the
// store; when the raylet runs TLS this port is TLS 1.3 only, with the node's certificate, and
// ranges go with SSL_write from a read-only mapping. Every request carries the cluster token.
// Each object is pinned in the store (Get/Release) while its range is sent.
// Bounds: at most `max_connections` connections at once (a connection past that is closed at
// once, unanswered); a request (and the TLS handshake) must arrive within `request_timeout`; an
// idle connection is closed after `idle_timeout`; a peer that stops reading fails the send after
// `send_timeout`. A malformed, oversized or unauthenticated request gets an error reply and the
// connection is closed; nothing a peer sends can stop the server.
// Start makes the process ignore SIGPIPE (a peer going away mid-send must not kill the raylet).
// Owned by the Raylet; borrows the store (must outlive it). Thread-safe: one accepting thread
// and one thread per connection, all joined (or waited for) by Shutdown.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/object_store/object_store.h"
#include "src/raylet/data_connection.h"
#include "src/rpc/cluster_token.h"

namespace troupe {

struct ObjectDataServerOptions {
  std::string bind_address = "127.0.0.1";
  int port = 0;  // 0: any free port
  ClusterToken token;
  std::shared_ptr<const DataTls> tls;  // null: plaintext
  int max_connections = 64;
  absl::Duration request_timeout = absl::Seconds(5);
  absl::Duration idle_timeout = absl::Seconds(30);
  absl::Duration send_timeout = absl::Seconds(30);
  // Testing only: sleep this long before each MiB sent, so a test can stop the server mid-range.
  absl::Duration testing_send_delay = absl::ZeroDuration();
};

class ObjectDataServer {
 public:
  // Listens on bind_address:port. Fails if it cannot bind.
  static absl::StatusOr<std::unique_ptr<ObjectDataServer>> Start(ObjectStore* store,
                                                                 ObjectDataServerOptions options);
  ~ObjectDataServer();  // Shutdown
  ObjectDataServer(const ObjectDataServer&) = delete;
  ObjectDataServer& operator=(const ObjectDataServer&) = delete;

  int port() const { return port_; }
  // Connections open now, and ranges whose sending began so far (for tests and logs).
  int connections() const;
  int64_t ranges_started() const;
  // Stops accepting, breaks every open connection (their ranges end short) and waits for their
  // threads. Idempotent.
  void Shutdown();

 private:
  ObjectDataServer(ObjectStore* store, ObjectDataServerOptions options, int listen_fd, int port);
  void AcceptLoop();
  void RunConnection(int fd);
  // Serves requests on `connection` until it closes, fails or idles out.
  void Serve(DataConnection* connection);
  // Answers one request whose fixed part was read; false when the connection must close.
  bool ServeRequest(DataConnection* connection, const char* fixed);
  // Sends `header` and [offset, offset + length) of the pinned object at `path`.
  absl::Status SendRange(DataConnection* connection, const std::string& path, int64_t offset,
                         int64_t length, const std::string& header);

  ObjectStore* const store_;
  const ObjectDataServerOptions options_;
  const int listen_fd_;
  const int port_;
  std::thread accept_thread_;

  mutable absl::Mutex mu_;
  int64_t ranges_started_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Sockets of the running connection threads (Shutdown breaks them).
  absl::flat_hash_set<int> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
