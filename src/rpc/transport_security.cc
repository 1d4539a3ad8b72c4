#include "src/rpc/transport_security.h"

#include "absl/synchronization/mutex.h"

namespace troupe {
namespace {

absl::Mutex mu;
std::optional<TlsMaterial>* material ABSL_GUARDED_BY(mu) = new std::optional<TlsMaterial>();

std::optional<TlsMaterial> Current() {
  absl::MutexLock lock(&mu);
  return *material;
}

}  // namespace

void SetTransportSecurity(std::optional<TlsMaterial> next) {
  absl::MutexLock lock(&mu);
  *material = std::move(next);
}

absl::Status UseTlsDir(const std::string& tls_dir) {
  if (tls_dir.empty()) {
    SetTransportSecurity(std::nullopt);
    return absl::OkStatus();
  }
  auto loaded = ReadTlsMaterial(tls_dir);
  if (!loaded.ok()) return loaded.status();
  SetTransportSecurity(std::move(*loaded));
  return absl::OkStatus();
}

bool TlsEnabled() { return Current().has_value(); }

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials() {
  const std::optional<TlsMaterial> tls = Current();
  if (!tls) return grpc::InsecureServerCredentials();
  if (!tls->can_serve()) {
    return absl::FailedPreconditionError(
        "TLS is on but this process has no node certificate (node.pem/node.key) to serve with");
  }
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  // The CA goes with the leaf, so a joining node can find it (and check it against its pin).
  options.pem_key_cert_pairs.push_back({tls->key_pem, tls->cert_pem + tls->ca_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() {
  const std::optional<TlsMaterial> tls = Current();
  if (!tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls->ca_pem;
  return grpc::SslCredentials(options);
}

}  // namespace troupe
