// Whether a driver can still reach its cluster. The core worker probes the GCS and its local
// raylet every `probe_interval` (Check()); once they have been unreachable for longer than the
// reconnect limit (troupe::Config::gcs_reconnect_timeout_s, like Ray's
// gcs_rpc_server_reconnect_timeout_s) the cluster is declared gone, once: `on_unreachable` runs
// with a ClusterUnreachable status, and status() returns it from then on, so the core worker
// fails pending calls and new ones fail at once instead of retrying forever. A GCS or raylet that
// comes back within the limit is just a hiccup.
// The probes are plain functions (the core worker passes gRPC calls with short deadlines), and
// time comes from an injected Clock, so tests drive it with fakes (cluster_liveness_test.cc).
// Owned by CoreWorker. Thread-safe: Check() runs on one thread (the core worker's liveness
// thread); status() may be read from any thread. `on_unreachable` runs on the Check() thread
// without the lock held.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/common/clock.h"

namespace troupe {

// A status saying the cluster is gone (kUnavailable with a payload that marks it); the API
// throws troupe::ClusterUnreachableError for it.
absl::Status ClusterUnreachableStatus(const std::string& message);
bool IsClusterUnreachable(const absl::Status& status);

class ClusterLiveness {
 public:
  struct Options {
    std::string gcs_address;  // for the message
    absl::Duration reconnect_timeout = absl::Seconds(60);
  };
  // Each probe answers OK when its peer replied, else a status whose message names the peer; it
  // must return within a bounded time.
  using Probe = std::function<absl::Status()>;

  // `clock` is not owned and must outlive this. The limit counts from construction.
  ClusterLiveness(Options options, const Clock* clock, Probe probe_gcs, Probe probe_raylet,
                  std::function<void(const absl::Status&)> on_unreachable);

  // Probes both peers once (blocking for as long as the probes do). Both answer: reachable.
  // Either has failed every probe for longer than the limit: declared unreachable (once).
  void Check() ABSL_LOCKS_EXCLUDED(mu_);
  // OK while reachable; the ClusterUnreachable status once declared.
  absl::Status status() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Options options_;
  const Clock* clock_;
  Probe probe_gcs_;
  Probe probe_raylet_;
  std::function<void(const absl::Status&)> on_unreachable_;

  mutable absl::Mutex mu_;
  absl::Time last_reachable_ ABSL_GUARDED_BY(mu_);
  absl::Status unreachable_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
