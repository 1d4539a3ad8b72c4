// DataConnection: one TCP connection of the object data port (object_data_server.h), plaintext
// or TLS 1.3 through OpenSSL, seen as blocking reads and writes of exact lengths. The one place
// that converts errno and OpenSSL errors of the data port to absl::Status.
// DataTls holds the OpenSSL context of one side: a server presents the node certificate (with
// the CA after it, as the gRPC servers do); a client trusts only the cluster CA and checks the
// server's certificate names the host it dialled (an IP SAN for an IP literal, else a DNS SAN),
// like the gRPC channels of src/rpc/transport_security.h.
// Ownership: a DataConnection owns its socket and its SSL (closed on destruction); it borrows
// its DataTls, which must outlive it. Thread-safety: a DataTls is immutable and shared by any
// threads; a DataConnection is used by one thread at a time (Shutdown may come from another).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/tls/tls_files.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace troupe {

class DataTls {
 public:
  // Fails if the material lacks the CA (client) or the certificate and key (server).
  static absl::StatusOr<std::shared_ptr<const DataTls>> ForServer(const TlsMaterial& material);
  static absl::StatusOr<std::shared_ptr<const DataTls>> ForClient(const TlsMaterial& material);
  ~DataTls();
  DataTls(const DataTls&) = delete;
  DataTls& operator=(const DataTls&) = delete;

  SSL_CTX* context() const { return context_; }

 private:
  explicit DataTls(SSL_CTX* context) : context_(context) {}
  SSL_CTX* const context_;
};

// A node's two contexts: serving (its certificate) and pulling (the CA).
struct ObjectDataTls {
  std::shared_ptr<const DataTls> server;
  std::shared_ptr<const DataTls> client;
};
// From the node's TLS folder (src/tls/tls_files.h); an empty `tls_dir`: plaintext, both null.
absl::StatusOr<ObjectDataTls> LoadObjectDataTls(const std::string& tls_dir);

class DataConnection {
 public:
  // Connects to host:port within `timeout` (then TLS with `tls`, if not null, verifying the
  // server against `host`). Unavailable when nothing answers (refused, unreachable, timed out);
  // the handshake's failure is Unavailable too, with OpenSSL's reason, except that a server
  // closing the connection during the handshake (its connection cap) is Aborted.
  static absl::StatusOr<std::unique_ptr<DataConnection>> Connect(const std::string& host, int port,
                                                                 const DataTls* tls,
                                                                 absl::Duration timeout);
  // Takes an accepted socket (and owns it from now on).
  static std::unique_ptr<DataConnection> Adopt(int fd);
  // The TLS handshake as a server, bounded by the socket's receive timeout. Call once, first.
  absl::Status ServerHandshake(const DataTls& tls);
  ~DataConnection();
  DataConnection(const DataConnection&) = delete;
  DataConnection& operator=(const DataConnection&) = delete;

  // Blocking reads and writes of exactly `length` bytes. A read that hits the end of the stream
  // is Unavailable ("closed"); with zero bytes read *eof is set (if given) so callers can tell a
  // peer that went away between messages from one that broke off mid-message.
  absl::Status ReadExact(char* data, int64_t length, bool* eof = nullptr);
  absl::Status WriteAll(const char* data, int64_t length);
  // Sends `length` bytes of the file `fd` from `offset`: sendfile(2) on a plaintext connection;
  // with TLS, SSL_write from a read-only mapping of that part of the file.
  absl::Status SendFile(int fd, int64_t offset, int64_t length);

  // Waits until a read would not block (data, or the peer closed). False on timeout.
  bool WaitReadable(absl::Duration timeout);
  void SetTimeouts(absl::Duration receive, absl::Duration send);
  // Wakes up a blocked read or write on another thread (they fail); the socket stays open.
  void Shutdown();
  bool tls() const { return ssl_ != nullptr; }

 private:
  DataConnection(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  absl::Status Error(const char* what, int ssl_result);

  const int fd_;
  SSL* ssl_;  // set once, by Connect or ServerHandshake
};

}  // namespace troupe
