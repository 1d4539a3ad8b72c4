#include "src/tls/peer_certificates.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "src/tls/certificates.h"

namespace troupe {
namespace {

// A connected TCP socket to host:port with send/receive timeouts, or -1.
int Connect(const std::string& host, const std::string& port, absl::Duration timeout) {
  addrinfo hints{}, *result = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &result) != 0 || result == nullptr) return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv = absl::ToTimeval(timeout);
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, result->ai_addr, result->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(result);
  return fd;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> FetchPeerCertificates(const std::string& address,
                                                               absl::Duration timeout) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not host:port"));
  }
  const int fd = Connect(address.substr(0, colon), address.substr(colon + 1), timeout);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot connect to ", address));
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_client_method()),
                                                            SSL_CTX_free);
  // Nothing is trusted yet: the pin decides, after the handshake.
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_NONE, nullptr);
  SSL_CTX_set_min_proto_version(context.get(), TLS1_2_VERSION);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(context.get()), SSL_free);
  static const unsigned char kAlpn[] = {2, 'h', '2'};  // what a gRPC server expects
  SSL_set_alpn_protos(ssl.get(), kAlpn, sizeof(kAlpn));
  SSL_set_fd(ssl.get(), fd);
  std::vector<std::string> chain;
  if (SSL_connect(ssl.get()) == 1) {
    STACK_OF(X509)* certs = SSL_get_peer_cert_chain(ssl.get());
    for (int i = 0; certs != nullptr && i < sk_X509_num(certs); ++i) {
      std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
      PEM_write_bio_X509(bio.get(), sk_X509_value(certs, i));
      char* data = nullptr;
      const long size = BIO_get_mem_data(bio.get(), &data);
      chain.emplace_back(data, static_cast<size_t>(size));
    }
    SSL_shutdown(ssl.get());
  }
  ERR_clear_error();
  close(fd);
  if (chain.empty()) {
    return absl::UnavailableError(
        absl::StrCat("the head at ", address,
                     " does not speak TLS (was it started with --tls=off? then join "
                     "without --ca-cert-hash)"));
  }
  return chain;
}

absl::StatusOr<std::string> PinnedCa(const std::vector<std::string>& chain, const std::string& pin,
                                     const std::string& address) {
  const std::string wanted = absl::AsciiStrToLower(pin);
  std::string presented;
  for (size_t i = 1; i < chain.size(); ++i) {
    auto candidate = CaPin(chain[i]);
    if (!candidate.ok()) continue;
    if (*candidate == wanted) {
      if (auto status = VerifyCertificate(chain[i], chain[0]); !status.ok()) {
        return absl::PermissionDeniedError(absl::StrCat("refusing to join: the head at ", address,
                                                        " presented the pinned CA, but its own "
                                                        "certificate is not valid under it (",
                                                        status.message(), ")"));
      }
      return chain[i];
    }
    absl::StrAppend(&presented, presented.empty() ? "" : ", ", *candidate);
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "refusing to join: the head at ", address, " presented CA ",
      presented.empty() ? "(none)" : presented, ", which does not match --ca-cert-hash=", pin,
      ". The address may reach another cluster or an impostor; copy the command from the head's "
      "<session>/join_command"));
}

absl::Status CheckIssuedBy(const std::vector<std::string>& chain, const std::string& ca_pem,
                           const std::string& ca_source, const std::string& address) {
  if (chain.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("refusing to join: the head at ", address, " presented no certificate"));
  }
  absl::Status verified = VerifyCertificate(ca_pem, chain[0]);
  if (verified.ok()) return absl::OkStatus();
  auto ours = CaPin(ca_pem);
  std::string presented;
  for (size_t i = 1; i < chain.size(); ++i) {
    auto pin = CaPin(chain[i]);
    if (pin.ok()) absl::StrAppend(&presented, presented.empty() ? "" : ", ", *pin);
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "refusing to join: the head at ", address, " presented a certificate that the CA in ",
      ca_source, " (", ours.ok() ? *ours : "?", ") does not vouch for (", verified.message(),
      "; the head presented CA ", presented.empty() ? "(none)" : presented,
      "). The head runs with another CA, or the address reaches another cluster or an impostor: "
      "give the CA the head was started with (its --ca-cert)"));
}

absl::StatusOr<std::string> DiscoverPinnedCa(const std::string& address, const std::string& pin,
                                             absl::Duration timeout) {
  auto chain = FetchPeerCertificates(address, timeout);
  if (!chain.ok()) return chain.status();
  return PinnedCa(*chain, pin, address);
}

}  // namespace troupe
