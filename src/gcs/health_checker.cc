#include "src/gcs/health_checker.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"

namespace troupe {

HealthChecker::HealthChecker(HealthCheckOptions options, const Clock* clock, NodeProber* prober,
                             DeadCallback on_dead)
    : options_(options), clock_(clock), prober_(prober), on_dead_(std::move(on_dead)) {}

void HealthChecker::AddNode(const NodeId& node_id, const std::string& address) {
  absl::MutexLock lock(&mu_);
  NodeState& state = nodes_[node_id];
  state = NodeState{address, clock_->Now() + options_.period, 0, false, ++next_generation_};
}

void HealthChecker::OnNodeHeard(const NodeId& node_id) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  it->second.last_heard = clock_->Now();
  it->second.consecutive_failures = 0;
}

void HealthChecker::RemoveNode(const NodeId& node_id) {
  absl::MutexLock lock(&mu_);
  nodes_.erase(node_id);
}

size_t HealthChecker::num_nodes() const {
  absl::MutexLock lock(&mu_);
  return nodes_.size();
}

void HealthChecker::Tick() {
  struct Due {
    NodeId node_id;
    std::string address;
    uint64_t generation;
  };
  std::vector<Due> due;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (auto& [node_id, state] : nodes_) {
      if (state.probe_in_flight || state.next_probe > now) continue;
      if (now - state.last_heard < options_.period &&
          state.skipped_probes < options_.max_skipped_probes) {
        // Due one period after the last report, not after now: a raylet killed right after
        // reporting is still found dead within failure_threshold periods of the kill.
        state.next_probe = state.last_heard + options_.period;
        ++state.skipped_probes;
        continue;
      }
      state.probe_in_flight = true;
      state.next_probe = now + options_.period;
      state.skipped_probes = 0;
      due.push_back({node_id, state.address, state.generation});
    }
  }
  for (const Due& d : due) {
    prober_->Probe(d.node_id, d.address, options_.timeout,
                   [this, node_id = d.node_id, generation = d.generation](absl::Status status) {
                     OnProbeResult(node_id, generation, status);
                   });
  }
}

void HealthChecker::OnProbeResult(const NodeId& node_id, uint64_t generation,
                                  const absl::Status& status) {
  std::string reason;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(node_id);
    if (it == nodes_.end() || it->second.generation != generation) return;
    NodeState& state = it->second;
    state.probe_in_flight = false;
    if (status.ok()) {
      state.consecutive_failures = 0;
      return;
    }
    ++state.consecutive_failures;
    TROUPE_LOG(Warning) << "health check of node " << node_id.ShortHex() << " at " << state.address
                        << " failed (" << state.consecutive_failures << "/"
                        << options_.failure_threshold << "): " << status.message();
    if (state.consecutive_failures < options_.failure_threshold) return;
    reason = absl::StrCat("health check failed ", state.consecutive_failures,
                          " times in a row; last error: ", status.message());
    nodes_.erase(it);
  }
  on_dead_(node_id, reason);
}

}  // namespace troupe
