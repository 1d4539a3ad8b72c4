// TLS for `troupe start`: whether a head uses it, the head's CA and certificate, a joining
// node's pinned discovery of the CA and its certificate signed by the head, and the join command
// the head hands out. Files follow src/tls/tls_files.h in <session>/tls. Stateless functions,
// called from the CLI's one thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/common/session.h"
#include "src/rpc/gcs_client.h"
#include "src/tls/certificates.h"

namespace troupe {

// --tls: "auto" (on unless every daemon binds a loopback address, 127.0.0.0/8), "on", "off".
absl::StatusOr<bool> ResolveTlsMode(const std::string& flag, const std::string& bind);
bool IsLoopbackAddress(const std::string& address);

// The names a node's certificate carries: its address (and bind address, unless a wildcard),
// 127.0.0.1 and localhost (so local clients verify too).
std::vector<std::string> CertificateNames(const std::string& node_ip, const std::string& bind);

// --tls-san: extra names for the head's certificate, comma-separated host names or IP literals
// (e.g. a Kubernetes Service name that nodes join by). InvalidArgument for anything else.
absl::StatusOr<std::vector<std::string>> ParseExtraNames(const std::string& flag);

// OK unless `path` is readable or writable by other users (group access is allowed: Kubernetes
// gives a Secret volume's files to the pod's fsGroup). InvalidArgument saying what to do.
absl::Status CheckPrivateKeyFileMode(const std::string& path);

// Head with --ca-cert/--ca-key: reads and checks them (the key file's mode, a CA certificate, the
// key matching it). InvalidArgument naming the file, what is wrong and what to do.
absl::StatusOr<KeyAndCertificate> ReadGivenCa(const std::string& cert_path,
                                              const std::string& key_path);

// Joining node with --ca-cert: the CA certificate at `cert_path` (checked to be a CA). When
// `expected_pin` (--ca-cert-hash) is not empty it must be the file's pin. InvalidArgument else.
absl::StatusOr<std::string> ReadTrustedCa(const std::string& cert_path,
                                          const std::string& expected_pin);

// Head: writes the CA (key mode 0600) and the head's certificate into <session>/tls. The CA is
// `given_ca` (--ca-cert/--ca-key) when there is one; else a head restarting cluster
// `cluster_id_hex` reuses the CA of an earlier local session of that cluster (nodes that stay up
// keep trusting it); else a new one. Returns the CA pin (sha256:...).
absl::StatusOr<std::string> SetUpHeadTls(const Session& session, const std::string& temp_root,
                                         const std::string& cluster_id_hex,
                                         const std::vector<std::string>& names,
                                         const std::optional<KeyAndCertificate>& given_ca);

// Joining node: writes `ca_pem`, makes a key here (mode 0600, it never leaves this machine) and
// has the head sign a CSR for `names` through `gcs` (whose channel must already verify the CA).
absl::Status SetUpNodeTls(const Session& session, const std::string& ca_pem, GcsClient* gcs,
                          const std::vector<std::string>& names, const std::string& node_name);

// The command a new node runs to join: address, token and, with TLS, the CA pin.
std::string JoinCommand(const std::string& gcs_address, const std::string& token,
                        const std::string& ca_pin);

}  // namespace troupe
