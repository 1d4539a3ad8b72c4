#include "src/rpc/cluster_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace troupe {
namespace {
constexpr char kPrefix[] = "troupe";
constexpr size_t kSecretBytes = 32;
}  // namespace

ClusterToken ClusterToken::Generate(const ClusterId& cluster_id) {
  uint8_t secret[kSecretBytes];
  FillRandomBytes(secret, kSecretBytes);
  ClusterToken token;
  token.cluster_id_ = cluster_id;
  token.secret_hex_ = BytesToHex(std::string_view(reinterpret_cast<char*>(secret), kSecretBytes));
  return token;
}

absl::StatusOr<ClusterToken> ClusterToken::Parse(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(absl::StripAsciiWhitespace(text), '_');
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a Troupe cluster token (", why,
                     "); use the token `troupe start --head` wrote to its session directory"));
  };
  if (parts.size() != 3 || parts[0] != kPrefix) return bad("expected troupe_<cluster>_<secret>");
  auto cluster_id = ClusterId::FromHex(parts[1]);
  if (!cluster_id.ok()) return bad("bad cluster id");
  if (parts[2].size() != 2 * kSecretBytes || !HexToBytes(parts[2]).ok()) {
    return bad("bad secret");
  }
  ClusterToken token;
  token.cluster_id_ = *cluster_id;
  token.secret_hex_ = parts[2];
  return token;
}

std::string ClusterToken::ToString() const {
  return absl::StrCat(kPrefix, "_", cluster_id_.Hex(), "_", secret_hex_);
}

bool ClusterToken::Matches(const ClusterToken& other) const {
  if (cluster_id_ != other.cluster_id_ || secret_hex_.size() != other.secret_hex_.size()) {
    return false;
  }
  unsigned char diff = 0;
  for (size_t i = 0; i < secret_hex_.size(); ++i) diff |= secret_hex_[i] ^ other.secret_hex_[i];
  return diff == 0;
}

absl::StatusOr<ClusterToken> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read token file ", path));
  std::stringstream text;
  text << in.rdbuf();
  auto token = ClusterToken::Parse(text.str());
  if (!token.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, ": ", token.status().message()));
  }
  return token;
}

absl::Status WriteTokenFile(const std::string& path, const ClusterToken& token) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write token file ", path, ": ", std::strerror(errno)));
  }
  fchmod(fd, 0600);  // in case the file existed with wider permissions
  std::string text = token.ToString() + "\n";
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("short write to token file ", path));
  return absl::OkStatus();
}

}  // namespace troupe
