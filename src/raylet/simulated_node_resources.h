// SimulatedNodeResources: the resources of one simulated node (simulated_nodes.h) — its total,
// what the leases it granted hold, and, with churn, a background load standing for work the
// simulator only pretends runs there, redrawn before every report so that the node's available
// resources differ from one report to the next, as a busy raylet's do. Nothing runs for the
// background load; it only takes resources (so leases see less room) and moves the figures the
// node reports. Available = total - leased - background, never below zero.
// Owned by its simulated node. Thread-safe: leases come and go on gRPC threads, redraws happen on
// a reporting thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "src/common/resources.h"

namespace troupe {

class SimulatedNodeResources {
 public:
  // `seed` fixes the background draws (each node gets its own).
  SimulatedNodeResources(const ResourceSet& total, uint64_t seed);

  // Grants `demand` when it fits in what is available now, as a raylet's grant-or-reject does:
  // the new lease's ID, or nullopt (nothing taken) when it does not fit.
  std::optional<std::string> Lease(const ResourceSet& demand);
  // Gives a lease's resources back; false (nothing changes) for an unknown or returned lease.
  bool Return(const std::string& lease_id);
  // Redraws the background load: each resource takes a new whole amount between 0 and what the
  // leases leave of it (its total rounded down, less the leased), different from its last
  // amount whenever that range holds two amounts or more. A resource with less than one whole
  // unit free of leases (e.g. a 0.5 total) keeps no background load.
  void RedrawBackground();

  ResourceSet Available() const;
  const ResourceSet& total() const { return total_; }
  int num_leases() const;

 private:
  const ResourceSet total_;
  mutable absl::Mutex mu_;
  std::mt19937_64 random_ ABSL_GUARDED_BY(mu_);
  ResourceSet leased_ ABSL_GUARDED_BY(mu_);
  ResourceSet background_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, ResourceSet> leases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
