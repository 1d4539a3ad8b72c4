// Token authentication for gRPC: servers check the "authorization: Bearer <token>" metadata of
// every call; clients attach it. Every Troupe service handler calls TokenAuthenticator::Check
// first (see src/rpc/server.h's Respond helpers). Thread-safe (immutable after construction).
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/strings/string_view.h"
#include "src/rpc/cluster_token.h"

namespace troupe {

inline constexpr char kAuthMetadataKey[] = "authorization";

class TokenAuthenticator {
 public:
  explicit TokenAuthenticator(ClusterToken expected);

  // OK when the call carries this cluster's token; otherwise UNAUTHENTICATED with a message that
  // says whether the token was missing, malformed, from another cluster, or wrong.
  grpc::Status Check(const grpc::ServerContextBase& context) const;
  grpc::Status CheckValue(absl::string_view metadata_value) const;

 private:
  ClusterToken expected_;
  // "Bearer <expected token>": what every good call carries, compared in constant time before
  // anything is parsed (parsing is only for saying what is wrong with a bad one).
  std::string expected_value_;
};

// Adds the token to an outgoing call's metadata.
void AttachToken(grpc::ClientContext* context, const std::string& token);

}  // namespace troupe
