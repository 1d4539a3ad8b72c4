// Decides when a node is dead: probes every registered node once per `period`; a probe that fails
// or does not answer within `timeout` is a failure, and `failure_threshold` failures in a row
// mark the node dead (the on_dead callback). With the defaults (period 1 s, timeout 1 s, threshold
// 3) a SIGKILLed raylet is declared dead in about 3 s (connection refused fails a probe at once).
// Time comes from a Clock and Tick() is driven from outside (the GCS timer thread, or a test), so
// the logic is deterministic under a FakeClock.
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
};

class HealthChecker {
 public:
  using DeadCallback = std::function<void(const NodeId&, const std::string& reason)>;

  HealthChecker(HealthCheckOptions options, const Clock* clock, NodeProber* prober,
                DeadCallback on_dead);

  void AddNode(const NodeId& node_id, const std::string& address);
  // Stops checking the node (it unregistered or was declared dead); a probe in flight is ignored.
  void RemoveNode(const NodeId& node_id);
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
