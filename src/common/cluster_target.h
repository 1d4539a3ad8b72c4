// Which cluster a CLI command talks to, and with which token:
//   address: --address, else $TROUPE_ADDRESS, else the address in session_latest (only while
//            that session's daemons run: a stopped or killed one's is refused, naming it)
//   token:   --token,   else $TROUPE_TOKEN,   else the token of a local session with that address
//   TLS:     $TROUPE_TLS_DIR, else the tls/ folder of a local session with that address (a head's
//            or a joined node's), else none (plaintext)
// TROUPE_ADDRESS=auto (or --address=auto) means this machine's latest session, like no address;
// "local" (a driver's embedded cluster) is refused, saying so.
// Stateless.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace troupe {

inline constexpr int kDefaultGcsPort = 6380;

struct ClusterTarget {
  std::string address;  // host:port of the GCS
  std::string token;
  std::string tls_dir;  // src/tls/tls_files.h layout; empty: the cluster runs without TLS
};

// FailedPrecondition (no cluster known) or Unauthenticated (no token) with what to do.
absl::StatusOr<ClusterTarget> ResolveClusterTarget(const std::string& address_flag,
                                                   const std::string& token_flag,
                                                   const std::string& temp_root);

// The local IPv4 address that routes to `host` (what a node or driver here should advertise);
// 127.0.0.1 if it cannot be found.
std::string LocalAddressToward(const std::string& host);

// "host" -> "host:6380"; "host:port" unchanged.
std::string WithDefaultPort(const std::string& address);

}  // namespace troupe
