#include "src/raylet/data_connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace troupe {
namespace {

// TLS 1.3 only; AES-128-GCM first (AES-NI makes it the cheapest here, and the bulk cost of TLS is
// the cipher).
constexpr char kCipherSuites[] =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
// Bytes OpenSSL reads from the socket at once (several records per recv instead of one).
constexpr size_t kTlsReadBuffer = 256 << 10;
// SSL_write is handed this much at a time (it still makes 16 KiB records).
constexpr int64_t kTlsWriteSlice = 4 << 20;

std::string OpenSslErrors() {
  std::string text;
  while (unsigned long error = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(error, buffer, sizeof(buffer));
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text.empty() ? "no OpenSSL error recorded" : text;
}

using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;
Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
}

SSL_CTX* NewContext(const SSL_METHOD* method) {
  SSL_CTX* context = SSL_CTX_new(method);
  if (context == nullptr) return nullptr;
  SSL_CTX_set_min_proto_version(context, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(context, kCipherSuites);
  SSL_CTX_set_options(context, SSL_OP_IGNORE_UNEXPECTED_EOF);  // a peer may just close
  SSL_CTX_set_read_ahead(context, 1);
  SSL_CTX_set_default_read_buffer_len(context, kTlsReadBuffer);
  return context;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const DataTls>> DataTls::ForServer(const TlsMaterial& material) {
  if (!material.can_serve()) {
    return absl::FailedPreconditionError(
        "TLS is on but this node has no certificate (node.pem/node.key) to serve object data");
  }
  SSL_CTX* context = NewContext(TLS_server_method());
  if (context == nullptr) return absl::InternalError("SSL_CTX_new: " + OpenSslErrors());
  std::shared_ptr<const DataTls> tls(new DataTls(context));
  SSL_CTX_set_options(context, SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_num_tickets(context, 0);  // no resumption: connections are long-lived
  Bio cert_bio = MemoryBio(material.cert_pem);
  X509* cert = PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr);
  const bool cert_ok = cert != nullptr && SSL_CTX_use_certificate(context, cert) == 1;
  X509_free(cert);
  Bio ca_bio = MemoryBio(material.ca_pem);
  X509* ca = PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr);
  const bool ca_ok = ca != nullptr && SSL_CTX_add1_chain_cert(context, ca) == 1;
  X509_free(ca);
  Bio key_bio = MemoryBio(material.key_pem);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
  const bool key_ok = key != nullptr && SSL_CTX_use_PrivateKey(context, key) == 1 &&
                      SSL_CTX_check_private_key(context) == 1;
  EVP_PKEY_free(key);
  if (!cert_ok || !ca_ok || !key_ok) {
    return absl::InvalidArgumentError("the node's TLS certificate, CA or key is unusable: " +
                                      OpenSslErrors());
  }
  return tls;
}

absl::StatusOr<std::shared_ptr<const DataTls>> DataTls::ForClient(const TlsMaterial& material) {
  SSL_CTX* context = NewContext(TLS_client_method());
  if (context == nullptr) return absl::InternalError("SSL_CTX_new: " + OpenSslErrors());
  std::shared_ptr<const DataTls> tls(new DataTls(context));
  X509_STORE* store = SSL_CTX_get_cert_store(context);
  Bio ca_bio = MemoryBio(material.ca_pem);
  int added = 0;
  while (X509* ca = PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr)) {
    added += X509_STORE_add_cert(store, ca) == 1;
    X509_free(ca);
  }
  ERR_clear_error();  // the end of the PEM text reads as an error
  if (added == 0) return absl::InvalidArgumentError("no usable CA certificate in the TLS files");
  SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nullptr);
  return tls;
}

DataTls::~DataTls() { SSL_CTX_free(context_); }

absl::StatusOr<ObjectDataTls> LoadObjectDataTls(const std::string& tls_dir) {
  if (tls_dir.empty()) return ObjectDataTls{};
  auto material = ReadTlsMaterial(tls_dir);
  if (!material.ok()) return material.status();
  auto server = DataTls::ForServer(*material);
  if (!server.ok()) return server.status();
  auto client = DataTls::ForClient(*material);
  if (!client.ok()) return client.status();
  return ObjectDataTls{*server, *client};
}

absl::StatusOr<std::unique_ptr<DataConnection>> DataConnection::Connect(const std::string& host,
                                                                        int port,
                                                                        const DataTls* tls,
                                                                        absl::Duration timeout) {
  const std::string where = absl::StrCat(host, ":", port);
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host));
  }
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int error = fd < 0 ? errno : 0;
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    error = errno;
    if (error == EINPROGRESS) {
      pollfd waiting{fd, POLLOUT, 0};
      const int ready = poll(&waiting, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
      socklen_t length = sizeof(error);
      if (ready <= 0) {
        error = ETIMEDOUT;
      } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
        error = errno;
      }
    }
  }
  freeaddrinfo(found);
  if (error != 0) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", where, ": ", std::strerror(error)));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::unique_ptr<DataConnection> connection;
  if (tls == nullptr) {
    connection.reset(new DataConnection(fd, nullptr));
    return connection;
  }
  SSL* ssl = SSL_new(tls->context());
  connection.reset(new DataConnection(fd, ssl));
  if (ssl == nullptr) return absl::InternalError("SSL_new: " + OpenSslErrors());
  connection->SetTimeouts(timeout, timeout);
  SSL_set_fd(ssl, fd);
  in6_addr ip;
  const bool is_ip = inet_pton(AF_INET, host.c_str(), &ip) == 1 ||
                     inet_pton(AF_INET6, host.c_str(), &ip) == 1;
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
  } else {
    SSL_set1_host(ssl, host.c_str());
    SSL_set_tlsext_host_name(ssl, host.c_str());
  }
  ERR_clear_error();
  errno = 0;
  const int result = SSL_connect(ssl);
  if (result != 1) {
    const int kind = SSL_get_error(ssl, result);
    const int error = errno;
    if (kind == SSL_ERROR_ZERO_RETURN ||
        (kind == SSL_ERROR_SYSCALL && (error == 0 || error == ECONNRESET || error == EPIPE))) {
      ERR_clear_error();
      return absl::AbortedError(
          absl::StrCat(where, " closed the connection during the TLS handshake"));
    }
    absl::Status status = connection->Error("TLS handshake", result);
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      status = absl::UnavailableError(absl::StrCat("the object data server at ", where,
                                                   " failed verification: ",
                                                   X509_verify_cert_error_string(verify)));
    }
    return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
  }
  return connection;
}

std::unique_ptr<DataConnection> DataConnection::Adopt(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return std::unique_ptr<DataConnection>(new DataConnection(fd, nullptr));
}

absl::Status DataConnection::ServerHandshake(const DataTls& tls) {
  ssl_ = SSL_new(tls.context());
  if (ssl_ == nullptr) return absl::InternalError("SSL_new: " + OpenSslErrors());
  SSL_set_fd(ssl_, fd_);
  ERR_clear_error();
  errno = 0;
  const int result = SSL_accept(ssl_);
  return result == 1 ? absl::OkStatus() : Error("TLS handshake", result);
}

DataConnection::~DataConnection() {
  if (ssl_ != nullptr) SSL_free(ssl_);  // no close_notify: the peer reads EOF either way
  close(fd_);
}

absl::Status DataConnection::Error(const char* what, int ssl_result) {
  const int saved_errno = errno;
  if (ssl_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        what, ": ", saved_errno == EAGAIN ? "timed out" : std::strerror(saved_errno)));
  }
  const int kind = SSL_get_error(ssl_, ssl_result);
  std::string reason;
  if (kind == SSL_ERROR_ZERO_RETURN) {
    reason = "closed by the peer";
  } else if (kind == SSL_ERROR_SYSCALL) {
    reason = saved_errno == 0      ? "closed by the peer"
             : saved_errno == EAGAIN ? "timed out"
                                     : std::strerror(saved_errno);
  } else if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE) {
    reason = "timed out";
  } else {
    reason = OpenSslErrors();
  }
  ERR_clear_error();
  return absl::UnavailableError(absl::StrCat(what, ": ", reason));
}

absl::Status DataConnection::ReadExact(char* data, int64_t length, bool* eof) {
  if (eof != nullptr) *eof = false;
  int64_t done = 0;
  while (done < length) {
    int64_t got = 0;
    if (ssl_ == nullptr) {
      const ssize_t result = recv(fd_, data + done, length - done, MSG_WAITALL);
      if (result < 0 && errno == EINTR) continue;
      if (result < 0) return Error("receiving", 0);
      got = result;
    } else {
      size_t read = 0;
      ERR_clear_error();
      errno = 0;
      const int result =
          SSL_read_ex(ssl_, data + done, static_cast<size_t>(length - done), &read);
      if (result != 1) {
        if (done == 0 && eof != nullptr) {
          const int kind = SSL_get_error(ssl_, result);
          *eof = kind == SSL_ERROR_ZERO_RETURN || (kind == SSL_ERROR_SYSCALL && errno == 0);
        }
        return Error("receiving", result);
      }
      got = static_cast<int64_t>(read);
    }
    if (got == 0) {
      if (done == 0 && eof != nullptr) *eof = true;
      return absl::UnavailableError(
          absl::StrCat("the connection closed after ", done, " of ", length, " bytes"));
    }
    done += got;
  }
  return absl::OkStatus();
}

absl::Status DataConnection::WriteAll(const char* data, int64_t length) {
  int64_t done = 0;
  while (done < length) {
    if (ssl_ == nullptr) {
      const ssize_t result = send(fd_, data + done, length - done, MSG_NOSIGNAL);
      if (result < 0 && errno == EINTR) continue;
      if (result < 0) return Error("sending", 0);
      done += result;
    } else {
      size_t written = 0;
      ERR_clear_error();
      errno = 0;
      const int result = SSL_write_ex(
          ssl_, data + done, static_cast<size_t>(std::min(length - done, kTlsWriteSlice)),
          &written);
      if (result != 1) return Error("sending", result);
      done += static_cast<int64_t>(written);
    }
  }
  return absl::OkStatus();
}

absl::Status DataConnection::SendFile(int fd, int64_t offset, int64_t length) {
  if (length == 0) return absl::OkStatus();
  if (ssl_ == nullptr) {
    off_t position = offset;
    const off_t end = offset + length;
    while (position < end) {
      const ssize_t sent = sendfile(fd_, fd, &position, static_cast<size_t>(end - position));
      if (sent < 0 && errno == EINTR) continue;
      if (sent < 0) return Error("sendfile", 0);
      if (sent == 0) return absl::DataLossError("the object file is shorter than the object");
    }
    return absl::OkStatus();
  }
  static const int64_t kPage = sysconf(_SC_PAGESIZE);
  const int64_t begin = offset / kPage * kPage;
  const int64_t mapped_length = offset + length - begin;
  // MAP_POPULATE: the pages are mapped in one go, not faulted in 16 at a time while sending.
  void* mapped = mmap(nullptr, mapped_length, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, begin);
  if (mapped == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("cannot map the object: ", std::strerror(errno)));
  }
  absl::Status status = WriteAll(static_cast<const char*>(mapped) + (offset - begin), length);
  munmap(mapped, mapped_length);
  return status;
}

bool DataConnection::WaitReadable(absl::Duration timeout) {
  if (ssl_ != nullptr && SSL_has_pending(ssl_) == 1) return true;
  pollfd waiting{fd_, POLLIN, 0};
  int result;
  do {
    result = poll(&waiting, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  } while (result < 0 && errno == EINTR);
  return result > 0;
}

void DataConnection::SetTimeouts(absl::Duration receive, absl::Duration send) {
  timeval receive_tv = absl::ToTimeval(receive), send_tv = absl::ToTimeval(send);
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &receive_tv, sizeof(receive_tv));
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &send_tv, sizeof(send_tv));
}

void DataConnection::Shutdown() { shutdown(fd_, SHUT_RDWR); }

}  // namespace troupe
