// The cluster token: the shared secret every gRPC call and HTTP request must carry. It names the
// cluster it belongs to, so a caller holding another cluster's token gets "wrong cluster", not a
// bare "denied". Format: "troupe_<cluster id hex>_<64 hex chars of secret>". Value type.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "src/common/ids.h"

namespace troupe {

class ClusterToken {
 public:
  // A new token for `cluster_id` with 256 random bits of secret.
  static ClusterToken Generate(const ClusterId& cluster_id);
  // Fails with InvalidArgument when `text` is not a token (surrounding whitespace is ignored).
  static absl::StatusOr<ClusterToken> Parse(const std::string& text);

  const ClusterId& cluster_id() const { return cluster_id_; }
  std::string ToString() const;
  // Compares secrets in constant time.
  bool Matches(const ClusterToken& other) const;

 private:
  ClusterId cluster_id_;
  std::string secret_hex_;
};

// Reads a token file (as written by `troupe start --head`). NotFound if missing.
absl::StatusOr<ClusterToken> ReadTokenFile(const std::string& path);
// Writes the token with mode 0600 (the file is created or truncated).
absl::Status WriteTokenFile(const std::string& path, const ClusterToken& token);

}  // namespace troupe
