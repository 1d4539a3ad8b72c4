// The Redis flags of `troupe start --head` and `troupe gcs-server` (GCS fault tolerance, see
// docs/fault_tolerance.md): where the GCS keeps its tables so that it can be restarted. The
// password is never a flag value (command lines are world-readable in /proc): it comes from
// --redis-password-file or $TROUPE_REDIS_PASSWORD. Value type; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/common/flag_parser.h"
#include "src/gcs/redis_store_client.h"

namespace troupe {

// The exit code of a GCS that stopped because its Redis was gone for longer than
// --redis-give-up-s (or could not be reached at start for that long). The head supervisor does
// not restart such a GCS: a new one would fail the same way.
inline constexpr int kGcsStoreLostExitCode = 4;

struct RedisFlags {
  std::string address;        // "" = no Redis (the in-memory store)
  std::string username;
  std::string password_file;  // absolute once Resolve()d
  int64_t give_up_s = 60;

  void Register(FlagParser* flags);
  // Fills the address from $TROUPE_REDIS_ADDRESS when the flag was not given (start only), makes
  // the password file path absolute and checks the values. InvalidArgument naming the flag.
  absl::Status Resolve(bool address_from_env);
  bool enabled() const { return !address.empty(); }
  // The options for RedisStoreClient / CheckRedis: reads the password (the file, else
  // $TROUPE_REDIS_PASSWORD). `key_prefix` is "troupe:<cluster id hex>" for a store.
  absl::StatusOr<RedisOptions> ToOptions(const std::string& key_prefix) const;
  // The flags that pass these settings on to a `troupe gcs-server` (never the password itself;
  // $TROUPE_REDIS_PASSWORD is inherited).
  std::vector<std::string> ToArgs() const;
};

// "troupe:<cluster id hex>": the key prefix of a cluster's tables in Redis.
std::string RedisKeyPrefix(const std::string& cluster_id_hex);

}  // namespace troupe
