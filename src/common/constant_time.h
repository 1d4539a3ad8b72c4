// ConstantTimeEquals: compares secrets (the cluster token, a "Bearer <token>" header) without an
// early exit, so the time a comparison takes does not tell an attacker how much of a guess
// matched. Every place that checks a token against a caller's value uses it: the HTTP API and
// dashboard login (src/http), gRPC auth (src/rpc/auth.cc, cluster_token.cc). Pure; thread-safe.
#pragma once

#include "absl/strings/string_view.h"

namespace troupe {

// True if `a` and `b` hold the same bytes. Only the lengths may leak (they are no secret).
inline bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

}  // namespace troupe
