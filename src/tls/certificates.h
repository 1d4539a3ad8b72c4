// The cluster's certificate authority and node certificates, with OpenSSL (the one adapter that
// converts OpenSSL errors to absl::Status). Everything here is PEM text in and out; nothing reads
// or writes files (see tls_files.h) or opens connections (see peer_certificates.h).
//   - `troupe start --head` creates the CA (GenerateCa) and issues the head's own certificate.
//   - A joining node makes its key and a CSR locally (GenerateKeyAndCsr); the head signs the CSR
//     (CertificateAuthority::SignCsr) over the token-authenticated channel. Keys never travel.
//   - Joining nodes pin the CA by CaPin (kubeadm's --discovery-token-ca-cert-hash: SHA-256 of the
//     CA certificate's DER SubjectPublicKeyInfo).
// Keys are ECDSA P-256; signatures SHA-256. Stateless functions; CertificateAuthority is
// immutable after Load and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace troupe {

// Default lifetimes (documented in docs/security.md).
inline constexpr absl::Duration kCaLifetime = absl::Hours(24 * 365 * 10);
inline constexpr absl::Duration kNodeCertificateLifetime = absl::Hours(24 * 365);

struct KeyAndCertificate {
  std::string key_pem;
  std::string cert_pem;
};

struct KeyAndCsr {
  std::string key_pem;
  std::string csr_pem;
};

// What a signed certificate says. Subject alternative names: IPv4/IPv6 literals become IP SANs,
// anything else DNS SANs.
struct CertificateRequest {
  std::string common_name;
  std::vector<std::string> subject_alt_names;
  absl::Time not_before = absl::InfinitePast();  // InfinitePast: now minus a minute (clock skew)
  absl::Duration lifetime = kNodeCertificateLifetime;
};

// A new self-signed CA ("Troupe cluster CA <cluster_name>") valid from now for `lifetime`.
absl::StatusOr<KeyAndCertificate> GenerateCa(const std::string& cluster_name,
                                             absl::Duration lifetime = kCaLifetime);

// A new private key and a CSR for `common_name`, signed with that key.
absl::StatusOr<KeyAndCsr> GenerateKeyAndCsr(const std::string& common_name);

// OK when `cert_pem` can be a cluster CA: a self-signed certificate with basicConstraints CA:TRUE
// (and keyCertSign, when it has a key usage), valid now. InvalidArgument saying what is missing.
absl::Status CheckCaCertificate(const std::string& cert_pem);

// The CA's pin: "sha256:<64 hex>" of the DER SubjectPublicKeyInfo of `cert_pem`.
absl::StatusOr<std::string> CaPin(const std::string& cert_pem);

// OK when `cert_pem` was signed by the CA in `ca_pem` and is valid now; otherwise
// PermissionDenied with OpenSSL's reason (e.g. "certificate has expired").
absl::Status VerifyCertificate(const std::string& ca_pem, const std::string& cert_pem);

// The subject alternative names of `cert_pem` (IP SANs as text).
absl::StatusOr<std::vector<std::string>> SubjectAltNames(const std::string& cert_pem);

class CertificateAuthority {
 public:
  // Fails with InvalidArgument when the key and certificate are not PEM, the certificate is no CA
  // (CheckCaCertificate) or the key is not the certificate's.
  static absl::StatusOr<CertificateAuthority> Load(const KeyAndCertificate& ca);

  const std::string& cert_pem() const { return cert_pem_; }

  // Signs the CSR's public key into a leaf certificate (serverAuth + clientAuth, not a CA) with
  // the names of `request` (the CSR's own subject and extensions are not trusted). Fails with
  // InvalidArgument when the CSR is malformed or its signature does not verify.
  absl::StatusOr<std::string> SignCsr(const std::string& csr_pem,
                                      const CertificateRequest& request) const;

  // A new key and a certificate for it signed here (the head issues its own this way).
  absl::StatusOr<KeyAndCertificate> Issue(const CertificateRequest& request) const;

 private:
  struct Keys;
  explicit CertificateAuthority(std::shared_ptr<const Keys> keys, std::string cert_pem)
      : keys_(std::move(keys)), cert_pem_(std::move(cert_pem)) {}
  std::shared_ptr<const Keys> keys_;
  std::string cert_pem_;
};

}  // namespace troupe
