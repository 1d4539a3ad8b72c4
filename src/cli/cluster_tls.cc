#include "src/cli/cluster_tls.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "src/tls/certificates.h"
#include "src/tls/tls_files.h"

namespace troupe {

bool IsLoopbackAddress(const std::string& address) {
  if (address == "localhost") return true;
  in_addr parsed{};
  if (inet_pton(AF_INET, address.c_str(), &parsed) != 1) return false;
  return (ntohl(parsed.s_addr) >> 24) == 127;
}

absl::StatusOr<bool> ResolveTlsMode(const std::string& flag, const std::string& bind) {
  if (flag == "on") return true;
  if (flag == "off") return false;
  if (flag == "auto" || flag.empty()) return !IsLoopbackAddress(bind);
  return absl::InvalidArgumentError(
      absl::StrCat("--tls must be auto, on or off, got '", flag, "'"));
}

std::vector<std::string> CertificateNames(const std::string& node_ip, const std::string& bind) {
  std::vector<std::string> names = {node_ip};
  if (!bind.empty() && bind != "0.0.0.0" && bind != node_ip) names.push_back(bind);
  for (const char* local : {"127.0.0.1", "localhost"}) {
    if (node_ip != local && bind != local) names.push_back(local);
  }
  return names;
}

absl::StatusOr<std::vector<std::string>> ParseExtraNames(const std::string& flag) {
  std::vector<std::string> names;
  for (absl::string_view name : absl::StrSplit(flag, ',', absl::SkipWhitespace())) {
    name = absl::StripAsciiWhitespace(name);
    for (char c : name) {
      if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != ':') {
        return absl::InvalidArgumentError(absl::StrCat(
            "--tls-san: '", name, "' is not a host name or IP address (give names separated by "
            "commas, e.g. --tls-san=troupe-head,troupe-head.default.svc)"));
      }
    }
    names.emplace_back(name);
  }
  return names;
}

absl::Status CheckPrivateKeyFileMode(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": ", strerror(errno)));
  }
  if ((info.st_mode & 0007) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s is open to other users (mode %04o): a CA key must not be; run `chmod 600 %s` (in "
        "Kubernetes: defaultMode: 0400 on the Secret volume)",
        path, info.st_mode & 07777, path));
  }
  return absl::OkStatus();
}

absl::StatusOr<KeyAndCertificate> ReadGivenCa(const std::string& cert_path,
                                              const std::string& key_path) {
  if (auto status = CheckPrivateKeyFileMode(key_path); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--ca-key: ", status.message()));
  }
  auto cert = ReadWholeFile(cert_path);
  if (!cert.ok()) return absl::InvalidArgumentError(absl::StrCat("--ca-cert: cannot read ", cert_path));
  auto key = ReadWholeFile(key_path);
  if (!key.ok()) return absl::InvalidArgumentError(absl::StrCat("--ca-key: cannot read ", key_path));
  if (auto status = CheckCaCertificate(*cert); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--ca-cert=", cert_path, ": ", status.message()));
  }
  const KeyAndCertificate files{*key, *cert};
  if (auto ca = CertificateAuthority::Load(files); !ca.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ca-key=", key_path, " with --ca-cert=", cert_path, ": ", ca.status().message(),
        " (give the key the CA certificate was made with: both files of `troupe tls make-ca`)"));
  }
  return files;
}

absl::StatusOr<std::string> ReadTrustedCa(const std::string& cert_path,
                                          const std::string& expected_pin) {
  auto cert = ReadWholeFile(cert_path);
  if (!cert.ok()) return absl::InvalidArgumentError(absl::StrCat("--ca-cert: cannot read ", cert_path));
  if (auto status = CheckCaCertificate(*cert); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--ca-cert=", cert_path, ": ", status.message()));
  }
  auto pin = CaPin(*cert);
  if (!pin.ok()) return pin.status();
  if (!expected_pin.empty() && absl::AsciiStrToLower(expected_pin) != *pin) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ca-cert-hash=", expected_pin, " does not match --ca-cert=", cert_path, " (its pin is ",
        *pin, "): give one of them, or the pair that belongs together (also check "
        "$TROUPE_CA_CERT_HASH)"));
  }
  return *cert;
}

namespace {

// The CA of an earlier local session of the same cluster, if one kept its key.
absl::StatusOr<KeyAndCertificate> EarlierCa(const std::string& temp_root,
                                            const std::string& cluster_id_hex) {
  std::vector<Session> sessions = Session::All(temp_root);
  for (auto it = sessions.rbegin(); it != sessions.rend(); ++it) {
    auto cluster_id = it->ReadFile("cluster_id");
    if (!cluster_id.ok() || *cluster_id != cluster_id_hex) continue;
    auto ca = ReadCaFiles(TlsDirOf(it->dir()));
    if (ca.ok()) return ca;
  }
  return absl::NotFoundError("no earlier CA");
}

absl::Status WriteKeyAndCertificate(const std::string& key_path, const std::string& cert_path,
                                    const KeyAndCertificate& files) {
  if (auto status = WriteFileWithMode(key_path, files.key_pem, 0600); !status.ok()) return status;
  return WriteFileWithMode(cert_path, files.cert_pem, 0644);
}

}  // namespace

absl::StatusOr<std::string> SetUpHeadTls(const Session& session, const std::string& temp_root,
                                         const std::string& cluster_id_hex,
                                         const std::vector<std::string>& names,
                                         const std::optional<KeyAndCertificate>& given_ca) {
  absl::StatusOr<KeyAndCertificate> ca_files =
      given_ca ? *given_ca : EarlierCa(temp_root, cluster_id_hex);
  if (!ca_files.ok()) ca_files = GenerateCa(cluster_id_hex.substr(0, 12));
  if (!ca_files.ok()) return ca_files.status();
  const std::string dir = TlsDirOf(session.dir());
  if (auto status = WriteKeyAndCertificate(CaKeyPath(dir), CaCertPath(dir), *ca_files);
      !status.ok()) {
    return status;
  }
  auto ca = CertificateAuthority::Load(*ca_files);
  if (!ca.ok()) return ca.status();
  // A new head certificate on every start: restarting the head is how it is rotated.
  auto head = ca->Issue({"troupe-head", names});
  if (!head.ok()) return head.status();
  if (auto status = WriteKeyAndCertificate(NodeKeyPath(dir), NodeCertPath(dir), *head);
      !status.ok()) {
    return status;
  }
  return CaPin(ca_files->cert_pem);
}

absl::Status SetUpNodeTls(const Session& session, const std::string& ca_pem, GcsClient* gcs,
                          const std::vector<std::string>& names, const std::string& node_name) {
  const std::string dir = TlsDirOf(session.dir());
  if (auto status = WriteFileWithMode(CaCertPath(dir), ca_pem, 0644); !status.ok()) return status;
  auto key_and_csr = GenerateKeyAndCsr(node_name);
  if (!key_and_csr.ok()) return key_and_csr.status();
  rpc::IssueNodeCertificateRequest request;
  request.set_csr_pem(key_and_csr->csr_pem);
  request.set_node_name(node_name);
  for (const std::string& name : names) request.add_addresses(name);
  auto issued = gcs->IssueNodeCertificate(request);
  if (!issued.ok()) {
    return absl::Status(issued.status().code(),
                        absl::StrCat("the head did not issue a certificate for this node: ",
                                     issued.status().message()));
  }
  if (auto status = VerifyCertificate(ca_pem, issued->cert_pem()); !status.ok()) return status;
  return WriteKeyAndCertificate(NodeKeyPath(dir), NodeCertPath(dir),
                                {key_and_csr->key_pem, issued->cert_pem()});
}

std::string JoinCommand(const std::string& gcs_address, const std::string& token,
                        const std::string& ca_pin) {
  std::string command = absl::StrCat("troupe start --address=", gcs_address, " --token=", token);
  if (!ca_pin.empty()) absl::StrAppend(&command, " --ca-cert-hash=", ca_pin);
  return command;
}

}  // namespace troupe
