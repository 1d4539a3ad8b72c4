#include "src/cli/head_token.h"

#include <cstdlib>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/session.h"
#include "src/common/sha256.h"

namespace troupe {

absl::StatusOr<ClusterToken> NewClusterToken(const std::string& given_token) {
  if (given_token.empty()) return ClusterToken::Generate(ClusterId::FromRandom());
  auto token = ClusterToken::Parse(given_token);
  if (!token.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token: ", token.status().message(),
                     " (a token is troupe_<16 hex: cluster ID>_<64 hex: secret>)"));
  }
  return *token;
}

namespace {

// The newest local session under `root` that ran a cluster with Redis at `address` under
// `redis_namespace` (sessions from before the namespace was recorded count as "default").
std::optional<Session> LastSessionWithRedis(const std::string& root, const std::string& address,
                                            const std::string& redis_namespace) {
  std::vector<Session> sessions = Session::All(root);
  for (auto it = sessions.rbegin(); it != sessions.rend(); ++it) {
    auto session_redis = it->ReadFile("redis_address");
    if (!session_redis.ok() || *session_redis != address) continue;
    auto session_namespace = it->ReadFile("redis_namespace");
    if ((session_namespace.ok() ? *session_namespace : "default") != redis_namespace) continue;
    if (!it->ReadFile("cluster_id").ok()) continue;
    return *it;
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<ClusterToken> ClusterTokenFromRedis(const std::string& given_token,
                                                   const std::string& redis_namespace,
                                                   const RedisOptions& redis,
                                                   const std::string& root, bool start_fresh,
                                                   bool* restart) {
  auto record = ReadClusterRecord(redis, redis_namespace);
  if (!record.ok()) {
    return absl::Status(record.status().code(),
                        absl::StrCat("cannot read the cluster record from Redis at ", redis.address,
                                     ": ", record.status().message()));
  }
  if (!record->has_value()) {
    if (!start_fresh) {
      if (std::optional<Session> earlier =
              LastSessionWithRedis(root, redis.address, redis_namespace)) {
        const std::string cluster_id = earlier->ReadFile("cluster_id").value_or("?");
        return absl::FailedPreconditionError(absl::StrCat(
            "Redis at ", redis.address, " holds no record of cluster ", cluster_id, " (namespace ",
            redis_namespace, "), which the head in ", earlier->dir(),
            " ran with it: Redis has lost its data (restarted without its append-only file or "
            "snapshot, or flushed), and with it that cluster's detached actors, jobs, placement "
            "groups and KV. Starting would make a new, empty cluster without a word. Restore "
            "Redis's data and run this again to restart that cluster, or add "
            "--redis-start-fresh to start a new cluster (or use another --redis-namespace)"));
      }
    }
    *restart = false;
    auto new_token = NewClusterToken(given_token);
    if (!new_token.ok()) return new_token.status();
    const ClusterToken token = *new_token;
    if (auto status = WriteClusterRecord(
            redis, redis_namespace,
            ClusterRecord{token.cluster_id().Hex(), Sha256Hex(token.ToString())});
        !status.ok()) {
      return absl::Status(status.code(), absl::StrCat("cannot record the new cluster in Redis at ",
                                                      redis.address, ": ", status.message()));
    }
    return token;
  }
  *restart = true;
  const ClusterRecord& recorded = **record;
  auto matches = [&](const ClusterToken& token) {
    return token.cluster_id().Hex() == recorded.cluster_id_hex &&
           Sha256Hex(token.ToString()) == recorded.token_hash_hex;
  };
  // --token must be right; a $TROUPE_TOKEN of another cluster is passed over.
  if (!given_token.empty()) {
    auto token = ClusterToken::Parse(given_token);
    if (!token.ok()) return token.status();
    if (!matches(*token)) {
      return absl::PermissionDeniedError(
          absl::StrCat("Redis at ", redis.address, " holds cluster ", recorded.cluster_id_hex,
                       " (namespace ", redis_namespace,
                       "), and the --token given is not its token; give its token "
                       "to restart it, or use --redis-namespace=... for a new cluster"));
    }
    return *token;
  }
  if (const char* env = std::getenv("TROUPE_TOKEN")) {
    auto token = ClusterToken::Parse(env);
    if (token.ok() && matches(*token)) return *token;
  }
  // The newest local session of that cluster whose token matches.
  std::vector<Session> sessions = Session::All(root);
  for (auto it = sessions.rbegin(); it != sessions.rend(); ++it) {
    auto cluster_id = it->ReadFile("cluster_id");
    if (!cluster_id.ok() || *cluster_id != recorded.cluster_id_hex) continue;
    auto token = ReadTokenFile(it->TokenPath());
    if (token.ok() && matches(*token)) return *token;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("Redis at ", redis.address, " holds cluster ", recorded.cluster_id_hex,
                   " (namespace ", redis_namespace,
                   "); give its token with --token=... to restart it, or use "
                   "--redis-namespace=... for a new cluster"));
}

}  // namespace troupe
