// The process's transport security for gRPC: plaintext, or TLS with the cluster's material.
// A composition root (a daemon's main, a worker's startup, a driver's Init) chooses once, before
// it starts servers or makes channels, from its --tls-dir / $TROUPE_TLS_DIR / session; from then
// on StartGrpcServer serves TLS with the node's certificate and MakeChannel verifies every peer
// against the cluster CA (and its address against the peer certificate's names). Clients are
// not asked for certificates: the cluster token authenticates callers, on top of TLS.
// One setting per process on purpose: every Troupe process belongs to one cluster at a time, and
// threading it through every client constructor would change dozens of call sites for nothing.
// Thread-safe (a mutex guards the setting; channels and servers keep the credentials they got).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "src/tls/tls_files.h"

namespace troupe {

// From now on, serve and connect with TLS using `material` (nullopt: plaintext).
void SetTransportSecurity(std::optional<TlsMaterial> material);
// Reads `tls_dir` (see src/tls/tls_files.h) and calls SetTransportSecurity; an empty `tls_dir`
// means plaintext. Fails when the folder lacks the CA certificate.
absl::Status UseTlsDir(const std::string& tls_dir);
bool TlsEnabled();

// Credentials for a server: TLS with the node certificate when TLS is on. FailedPrecondition
// when TLS is on but this process has no certificate (a client-only setting).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials();
// Credentials for a channel: TLS that trusts only the cluster CA when TLS is on.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials();

}  // namespace troupe
