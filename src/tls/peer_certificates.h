// Discovering the cluster CA from the head itself, pinned by its hash (kubeadm's discovery by
// --discovery-token-ca-cert-hash): open a TLS connection to the head's GCS without trusting
// anything yet, take the certificate chain it presents, and accept the CA in it only if its pin
// matches the one the user gave. Stateless, so safe from any thread; blocking (one short
// connection).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace troupe {

// The PEM certificates `host:port` presents in a TLS handshake, leaf first. Unavailable when
// nothing listens there or the peer does not speak TLS.
absl::StatusOr<std::vector<std::string>> FetchPeerCertificates(const std::string& address,
                                                               absl::Duration timeout);

// The PEM CA certificate among `chain` whose CaPin is `pin`, after checking that it signed the
// leaf. PermissionDenied, saying what was presented and what to check, when none matches.
absl::StatusOr<std::string> PinnedCa(const std::vector<std::string>& chain, const std::string& pin,
                                     const std::string& address);

// OK when the leaf of `chain` (what the head at `address` presented) was issued by the CA
// `ca_pem` (a CA given to a joining node with --ca-cert, read from `ca_source`) and is valid now.
// PermissionDenied "refusing to join: ..." saying which CA the head presented otherwise.
absl::Status CheckIssuedBy(const std::vector<std::string>& chain, const std::string& ca_pem,
                           const std::string& ca_source, const std::string& address);

// FetchPeerCertificates + PinnedCa.
absl::StatusOr<std::string> DiscoverPinnedCa(const std::string& address, const std::string& pin,
                                             absl::Duration timeout);

}  // namespace troupe
