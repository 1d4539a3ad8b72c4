#include "src/tls/tls_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace troupe {

std::string TlsDirOf(const std::string& session_dir) { return session_dir + "/tls"; }
std::string CaCertPath(const std::string& tls_dir) { return tls_dir + "/ca.pem"; }
std::string CaKeyPath(const std::string& tls_dir) { return tls_dir + "/ca.key"; }
std::string NodeCertPath(const std::string& tls_dir) { return tls_dir + "/node.pem"; }
std::string NodeKeyPath(const std::string& tls_dir) { return tls_dir + "/node.key"; }

absl::Status WriteFileWithMode(const std::string& path, const std::string& content, int mode) {
  const std::string folder = path.substr(0, path.rfind('/'));
  if (!folder.empty() && mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", folder, ": ", strerror(errno)));
  }
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  fchmod(fd, mode);  // an existing file keeps its mode through open(): set it
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
    }
    written += static_cast<size_t>(n);
  }
  close(fd);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

absl::StatusOr<TlsMaterial> ReadTlsMaterial(const std::string& tls_dir) {
  TlsMaterial material;
  auto ca = ReadWholeFile(CaCertPath(tls_dir));
  if (!ca.ok()) {
    return absl::NotFoundError(absl::StrCat("no cluster CA certificate in ", tls_dir, " (expected ",
                                            CaCertPath(tls_dir), ")"));
  }
  material.ca_pem = *ca;
  auto cert = ReadWholeFile(NodeCertPath(tls_dir));
  auto key = ReadWholeFile(NodeKeyPath(tls_dir));
  if (cert.ok() && key.ok()) {
    material.cert_pem = *cert;
    material.key_pem = *key;
  }
  return material;
}

absl::StatusOr<KeyAndCertificate> ReadCaFiles(const std::string& tls_dir) {
  auto cert = ReadWholeFile(CaCertPath(tls_dir));
  if (!cert.ok()) return cert.status();
  auto key = ReadWholeFile(CaKeyPath(tls_dir));
  if (!key.ok()) {
    return absl::NotFoundError(absl::StrCat("no CA key in ", tls_dir,
                                            " (only the head holds it: ", CaKeyPath(tls_dir), ")"));
  }
  return KeyAndCertificate{*key, *cert};
}

}  // namespace troupe
