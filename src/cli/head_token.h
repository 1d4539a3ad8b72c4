// Which token a new head starts with (`troupe start --head`): a new cluster's, or — with Redis —
// the recorded cluster's, so a restarted head keeps its cluster ID and token. Stateless
// functions; thread-compatible (they read the environment and the session directories).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "src/gcs/redis_store_client.h"
#include "src/rpc/cluster_token.h"

namespace troupe {

// The token of a new cluster: `given_token` (--token; so a deployment can hand the same token to
// the head and to nodes started before the head prints it, e.g. from a Kubernetes Secret), else
// a new random one. $TROUPE_TOKEN is not read here: a stray one must not name a new cluster.
absl::StatusOr<ClusterToken> NewClusterToken(const std::string& given_token);

// The cluster's token for a head that starts with Redis. A cluster recorded in Redis under
// `redis_namespace` is restarted (its ID and token stay: workers and drivers keep working) and
// its token must be known here: `given_token` (--token) / $TROUPE_TOKEN, else the token file of
// an earlier local session of that cluster under `root`. It is checked against the SHA-256 kept
// in Redis (never the token). No record: a new cluster (NewClusterToken), recorded now —
// unless a local session under `root` ran a cluster with this Redis address and namespace (its
// files redis_address, redis_namespace and cluster_id say so): then Redis lost that cluster
// (restarted without its data, flushed), and this fails with FailedPrecondition naming the
// cluster and the session, unless `start_fresh` (--redis-start-fresh). `*restart` says which.
absl::StatusOr<ClusterToken> ClusterTokenFromRedis(const std::string& given_token,
                                                   const std::string& redis_namespace,
                                                   const RedisOptions& redis,
                                                   const std::string& root, bool start_fresh,
                                                   bool* restart);

}  // namespace troupe
