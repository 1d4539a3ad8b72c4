#include "src/rpc/auth.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace troupe {
namespace {
constexpr char kBearer[] = "Bearer ";
constexpr char kHowToFix[] =
    "pass --token or set TROUPE_TOKEN to the token in the head's session directory (on the "
    "head: `cat <temp root>/session_latest/token`; the temp root is the head's --temp-dir, "
    "$TROUPE_TEMP_DIR or /tmp/troupe)";
}  // namespace

TokenAuthenticator::TokenAuthenticator(ClusterToken expected)
    : expected_(std::move(expected)),
      expected_value_(absl::StrCat(kBearer, expected_.ToString())) {}

grpc::Status TokenAuthenticator::Check(const grpc::ServerContextBase& context) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthMetadataKey);
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("this Troupe cluster requires a cluster token: ", kHowToFix));
  }
  return CheckValue(absl::string_view(it->second.data(), it->second.size()));
}

grpc::Status TokenAuthenticator::CheckValue(absl::string_view metadata_value) const {
  if (metadata_value.size() == expected_value_.size()) {
    unsigned char diff = 0;
    for (size_t i = 0; i < metadata_value.size(); ++i)
      diff |= metadata_value[i] ^ expected_value_[i];
    if (diff == 0) return grpc::Status::OK;
  }
  if (!absl::StartsWith(metadata_value, kBearer)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("authorization must be 'Bearer <token>'; ", kHowToFix));
  }
  auto token = ClusterToken::Parse(std::string(metadata_value.substr(sizeof(kBearer) - 1)));
  if (!token.ok()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(token.status().message()));
  }
  if (token->cluster_id() != expected_.cluster_id()) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat("the token is for cluster ", token->cluster_id().Hex(),
                     " but this is cluster ", expected_.cluster_id().Hex(),
                     ": you are talking to a different cluster's head; use this cluster's token (",
                     kHowToFix, ")"));
  }
  if (!token->Matches(expected_)) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat("wrong token for cluster ", expected_.cluster_id().Hex(), "; ", kHowToFix));
  }
  return grpc::Status::OK;
}

void AttachToken(grpc::ClientContext* context, const std::string& token) {
  if (token.empty()) return;  // the server says a token is required
  context->AddMetadata(kAuthMetadataKey, absl::StrCat(kBearer, token));
}

}  // namespace troupe
