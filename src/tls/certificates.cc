#include "src/tls/certificates.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace troupe {
namespace {

struct BioFree {
  void operator()(BIO* p) const { BIO_free(p); }
};
struct KeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
struct ReqFree {
  void operator()(X509_REQ* p) const { X509_REQ_free(p); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using ReqPtr = std::unique_ptr<X509_REQ, ReqFree>;

// OpenSSL's queued errors as one line (and the queue cleared): the single conversion point.
absl::Status OpenSslError(absl::StatusCode code, const std::string& what) {
  std::string reasons;
  while (unsigned long error = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(error, text, sizeof(text));
    absl::StrAppend(&reasons, reasons.empty() ? "" : "; ", text);
  }
  return absl::Status(code, reasons.empty() ? what : absl::StrCat(what, ": ", reasons));
}

absl::StatusOr<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError(absl::StatusCode::kInternal, "cannot generate a key");
  return key;
}

std::string Pem(const std::function<int(BIO*)>& write) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (write(bio.get()) != 1) return "";
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

std::string KeyPem(EVP_PKEY* key) {
  return Pem([key](BIO* bio) {
    return PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
}
std::string CertPem(X509* cert) {
  return Pem([cert](BIO* bio) { return PEM_write_bio_X509(bio, cert); });
}

absl::StatusOr<X509Ptr> ParseCert(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument, "not a PEM certificate");
  }
  return cert;
}

absl::StatusOr<KeyPtr> ParseKey(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument, "not a PEM private key");
  }
  return key;
}

bool IsIpLiteral(const std::string& name) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, name.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, name.c_str(), buffer) == 1;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value.c_str());
  if (extension == nullptr || X509_add_ext(cert, extension, -1) != 1) {
    X509_EXTENSION_free(extension);
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat("cannot add the certificate extension ", value));
  }
  X509_EXTENSION_free(extension);
  return absl::OkStatus();
}

// A certificate for `public_key` named `common_name`, valid [not_before, not_before+lifetime),
// issued by `issuer` (null: self-issued), not yet signed.
absl::StatusOr<X509Ptr> NewCertificate(EVP_PKEY* public_key, const std::string& common_name,
                                       X509* issuer, absl::Time not_before,
                                       absl::Duration lifetime) {
  X509Ptr cert(X509_new());
  X509_set_version(cert.get(), 2);  // v3
  unsigned char serial[16];
  RAND_bytes(serial, sizeof(serial));
  serial[0] &= 0x7f;  // positive
  BIGNUM* serial_number = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(serial_number, X509_get_serialNumber(cert.get()));
  BN_free(serial_number);
  if (not_before == absl::InfinitePast()) not_before = absl::Now() - absl::Minutes(1);
  ASN1_TIME_set(X509_getm_notBefore(cert.get()), absl::ToTimeT(not_before));
  ASN1_TIME_set(X509_getm_notAfter(cert.get()), absl::ToTimeT(not_before + lifetime));
  X509_set_pubkey(cert.get(), public_key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>("Troupe"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name);
  return cert;
}

}  // namespace

struct CertificateAuthority::Keys {
  KeyPtr key;
  X509Ptr cert;
};

absl::StatusOr<KeyAndCertificate> GenerateCa(const std::string& cluster_name,
                                             absl::Duration lifetime) {
  auto key = NewKey();
  if (!key.ok()) return key.status();
  auto cert = NewCertificate(key->get(), absl::StrCat("Troupe cluster CA ", cluster_name), nullptr,
                             absl::InfinitePast(), lifetime);
  if (!cert.ok()) return cert.status();
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                            std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                            std::pair{NID_subject_key_identifier, "hash"}}) {
    if (auto status = AddExtension(cert->get(), cert->get(), nid, value); !status.ok()) {
      return status;
    }
  }
  if (X509_sign(cert->get(), key->get(), EVP_sha256()) == 0) {
    return OpenSslError(absl::StatusCode::kInternal, "cannot sign the CA certificate");
  }
  return KeyAndCertificate{KeyPem(key->get()), CertPem(cert->get())};
}

absl::StatusOr<KeyAndCsr> GenerateKeyAndCsr(const std::string& common_name) {
  auto key = NewKey();
  if (!key.ok()) return key.status();
  ReqPtr request(X509_REQ_new());
  X509_REQ_set_version(request.get(), 0);
  X509_NAME* name = X509_REQ_get_subject_name(request.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_REQ_set_pubkey(request.get(), key->get());
  if (X509_REQ_sign(request.get(), key->get(), EVP_sha256()) == 0) {
    return OpenSslError(absl::StatusCode::kInternal, "cannot sign the certificate request");
  }
  std::string csr = Pem([&](BIO* bio) { return PEM_write_bio_X509_REQ(bio, request.get()); });
  return KeyAndCsr{KeyPem(key->get()), csr};
}

absl::StatusOr<std::string> CaPin(const std::string& cert_pem) {
  auto cert = ParseCert(cert_pem);
  if (!cert.ok()) return cert.status();
  unsigned char* der = nullptr;
  const int length = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert->get()), &der);
  if (length <= 0) return OpenSslError(absl::StatusCode::kInternal, "cannot encode the key");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_length = 0;
  EVP_Digest(der, length, digest, &digest_length, EVP_sha256(), nullptr);
  OPENSSL_free(der);
  std::string hex = "sha256:";
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned int i = 0; i < digest_length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

absl::Status CheckCaCertificate(const std::string& cert_pem) {
  auto cert = ParseCert(cert_pem);
  if (!cert.ok()) return cert.status();
  // X509_check_ca: 1 for CA:TRUE (and keyCertSign when a key usage is present).
  if (X509_check_ca(cert->get()) != 1) {
    return absl::InvalidArgumentError(
        "it is not a CA certificate (no basicConstraints CA:TRUE with keyCertSign): give the "
        "cluster CA's certificate, e.g. the ca.crt of `troupe tls make-ca`, not a node's");
  }
  if (X509_check_issued(cert->get(), cert->get()) != X509_V_OK) {
    return absl::InvalidArgumentError(
        "it is not self-signed: give a root CA (an intermediate CA is not supported)");
  }
  time_t now = absl::ToTimeT(absl::Now());
  if (X509_cmp_time(X509_get0_notAfter(cert->get()), &now) <= 0) {
    return absl::InvalidArgumentError("the CA certificate has expired: make a new CA");
  }
  if (X509_cmp_time(X509_get0_notBefore(cert->get()), &now) > 0) {
    return absl::InvalidArgumentError(
        "the CA certificate is not valid yet (check this machine's clock)");
  }
  return absl::OkStatus();
}

absl::Status VerifyCertificate(const std::string& ca_pem, const std::string& cert_pem) {
  auto ca = ParseCert(ca_pem);
  if (!ca.ok()) return ca.status();
  auto cert = ParseCert(cert_pem);
  if (!cert.ok()) return cert.status();
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  X509_STORE_add_cert(store.get(), ca->get());
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> context(X509_STORE_CTX_new(),
                                                                          X509_STORE_CTX_free);
  X509_STORE_CTX_init(context.get(), store.get(), cert->get(), nullptr);
  if (X509_verify_cert(context.get()) == 1) return absl::OkStatus();
  ERR_clear_error();
  return absl::PermissionDeniedError(
      absl::StrCat("certificate not trusted by the cluster CA: ",
                   X509_verify_cert_error_string(X509_STORE_CTX_get_error(context.get()))));
}

absl::StatusOr<std::vector<std::string>> SubjectAltNames(const std::string& cert_pem) {
  auto cert = ParseCert(cert_pem);
  if (!cert.ok()) return cert.status();
  std::vector<std::string> names;
  auto* sans = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert->get(), NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; sans != nullptr && i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
    if (name->type == GEN_DNS) {
      names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(name->d.dNSName)),
                         ASN1_STRING_length(name->d.dNSName));
    } else if (name->type == GEN_IPADD && ASN1_STRING_length(name->d.iPAddress) == 4) {
      char text[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, ASN1_STRING_get0_data(name->d.iPAddress), text, sizeof(text));
      names.emplace_back(text);
    }
  }
  GENERAL_NAMES_free(sans);
  return names;
}

absl::StatusOr<CertificateAuthority> CertificateAuthority::Load(const KeyAndCertificate& ca) {
  auto keys = std::make_shared<Keys>();
  auto key = ParseKey(ca.key_pem);
  if (!key.ok()) return key.status();
  auto cert = ParseCert(ca.cert_pem);
  if (!cert.ok()) return cert.status();
  if (auto status = CheckCaCertificate(ca.cert_pem); !status.ok()) return status;
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the CA key does not belong to the CA certificate");
  }
  keys->key = std::move(*key);
  keys->cert = std::move(*cert);
  return CertificateAuthority(std::move(keys), ca.cert_pem);
}

absl::StatusOr<std::string> CertificateAuthority::SignCsr(const std::string& csr_pem,
                                                          const CertificateRequest& request) const {
  BioPtr bio(BIO_new_mem_buf(csr_pem.data(), static_cast<int>(csr_pem.size())));
  ReqPtr csr(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  if (csr == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument, "not a PEM certificate request");
  }
  EVP_PKEY* public_key = X509_REQ_get0_pubkey(csr.get());
  if (public_key == nullptr || X509_REQ_verify(csr.get(), public_key) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        "the certificate request's signature does not verify");
  }
  if (request.subject_alt_names.empty()) {
    return absl::InvalidArgumentError("a node certificate needs at least one address");
  }
  auto cert = NewCertificate(public_key, request.common_name, keys_->cert.get(), request.not_before,
                             request.lifetime);
  if (!cert.ok()) return cert.status();
  std::vector<std::string> sans;
  for (const std::string& name : request.subject_alt_names) {
    sans.push_back(absl::StrCat(IsIpLiteral(name) ? "IP:" : "DNS:", name));
  }
  for (auto [nid, value] :
       {std::pair<int, std::string>{NID_basic_constraints, "critical,CA:FALSE"},
        std::pair<int, std::string>{NID_key_usage, "critical,digitalSignature,keyEncipherment"},
        std::pair<int, std::string>{NID_ext_key_usage, "serverAuth,clientAuth"},
        std::pair<int, std::string>{NID_authority_key_identifier, "keyid:always"},
        std::pair<int, std::string>{NID_subject_alt_name, absl::StrJoin(sans, ",")}}) {
    if (auto status = AddExtension(cert->get(), keys_->cert.get(), nid, value); !status.ok()) {
      return status;
    }
  }
  if (X509_sign(cert->get(), keys_->key.get(), EVP_sha256()) == 0) {
    return OpenSslError(absl::StatusCode::kInternal, "cannot sign the certificate");
  }
  return CertPem(cert->get());
}

absl::StatusOr<KeyAndCertificate> CertificateAuthority::Issue(
    const CertificateRequest& request) const {
  auto key_and_csr = GenerateKeyAndCsr(request.common_name);
  if (!key_and_csr.ok()) return key_and_csr.status();
  auto cert = SignCsr(key_and_csr->csr_pem, request);
  if (!cert.ok()) return cert.status();
  return KeyAndCertificate{key_and_csr->key_pem, *cert};
}

}  // namespace troupe
