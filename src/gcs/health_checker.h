// Decides when a node is dead: probes every registered node once per `period`; a probe that fails
// or does not answer within `timeout` is a failure, and `failure_threshold` failures in a row
// mark the node dead (the on_dead callback). With the defaults (period 1 s, timeout 1 s, threshold
// 3) a SIGKILLed raylet is declared dead in about 3 s (connection refused fails a probe at once).
// Time comes from a Clock and Tick() is driven from outside (the GCS timer thread, or a test), so
// the logic is deterministic under a FakeClock.
// A node heard from within the last period (OnNodeHeard: its resource report arrived) is alive
// and connected, so its probe is skipped, for up to `max_skipped_probes` periods in a row; then
// it is probed anyway, so the GCS's path to the raylet's port is checked too. This halves the
// RPCs a large cluster costs the GCS (one report per node per report period instead of a report
// and a probe), and a probe that times out on a busy machine no longer counts against a node
// whose reports get through. A skipped node's next probe is due one period after its last
// report, so a SIGKILLed raylet is still declared dead within failure_threshold periods of the
// kill (its last report came before it).
// Thread-safe. on_dead runs on the thread that delivers the failing probe result, without locks
// held.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/common/clock.h"
#include "src/common/ids.h"

namespace troupe {

// Sends one health probe to a node; the real one is a gRPC call to the raylet.
class NodeProber {
 public:
  virtual ~NodeProber() = default;
  // Calls `done` exactly once, on any thread, with OK if the node answered in time.
  virtual void Probe(const NodeId& node_id, const std::string& address, absl::Duration timeout,
                     std::function<void(absl::Status)> done) = 0;
};

struct HealthCheckOptions {
  absl::Duration period = absl::Seconds(1);
  absl::Duration timeout = absl::Seconds(1);
  int failure_threshold = 3;
  int max_skipped_probes = 9;  // 0: probe every period whatever was heard
};

class HealthChecker {
 public:
  using DeadCallback = std::function<void(const NodeId&, const std::string& reason)>;

  HealthChecker(HealthCheckOptions options, const Clock* clock, NodeProber* prober,
                DeadCallback on_dead);

  void AddNode(const NodeId& node_id, const std::string& address);
  // Stops checking the node (it unregistered or was declared dead); a probe in flight is ignored.
  void RemoveNode(const NodeId& node_id);
  // The node was heard from (its report arrived): it counts as a successful probe now.
  void OnNodeHeard(const NodeId& node_id);
  // Starts probes that are due.
  void Tick();
  size_t num_nodes() const;
  const HealthCheckOptions& options() const { return options_; }

 private:
  struct NodeState {
    std::string address;
    absl::Time next_probe;
    int consecutive_failures = 0;
    bool probe_in_flight = false;
    uint64_t generation;  // tells results for a removed-then-re-added node apart
    absl::Time last_heard = absl::InfinitePast();
    int skipped_probes = 0;  // in a row, because the node was heard from
  };
  void OnProbeResult(const NodeId& node_id, uint64_t generation, const absl::Status& status);

  const HealthCheckOptions options_;
  const Clock* clock_;
  NodeProber* prober_;
  DeadCallback on_dead_;
  mutable absl::Mutex mu_;
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<NodeId, NodeState> nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
