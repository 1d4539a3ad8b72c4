// A node's TLS files, kept in <session>/tls/ (TlsDirOf):
//   ca.pem    the cluster CA certificate (what every client trusts)
//   ca.key    the CA's private key: on the head only, mode 0600
//   node.pem  this node's certificate (issued by the CA; servers on this node present it)
//   node.key  its private key, mode 0600 (made on this node; never leaves it)
// Daemons get the folder with --tls-dir; workers and drivers with $TROUPE_TLS_DIR (the raylet
// passes it to workers) or find it in the local session of the cluster they connect to.
// Stateless functions, safe from any thread (two processes writing one folder at once are not
// coordinated: one node owns its session folder).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "src/tls/certificates.h"

namespace troupe {

inline constexpr char kTlsDirEnv[] = "TROUPE_TLS_DIR";

// What a process needs for TLS: the CA to verify peers against and, to serve, its own
// certificate and key (empty for a client only, such as the CLI on a machine that is no node).
struct TlsMaterial {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
  bool can_serve() const { return !cert_pem.empty() && !key_pem.empty(); }
};

std::string TlsDirOf(const std::string& session_dir);
std::string CaCertPath(const std::string& tls_dir);
std::string CaKeyPath(const std::string& tls_dir);
std::string NodeCertPath(const std::string& tls_dir);
std::string NodeKeyPath(const std::string& tls_dir);

// Reads ca.pem (required: NotFound otherwise) and node.pem/node.key when both are there.
absl::StatusOr<TlsMaterial> ReadTlsMaterial(const std::string& tls_dir);
// Reads the CA key and certificate (the head's GCS signs node certificates with them).
absl::StatusOr<KeyAndCertificate> ReadCaFiles(const std::string& tls_dir);

// Writes `content` to `path` with `mode` (created or truncated; the mode is set before any byte
// is written, so a key is never readable by others even for a moment). Creates the folder.
absl::Status WriteFileWithMode(const std::string& path, const std::string& content, int mode);
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace troupe
