#include "src/raylet/simulated_node_resources.h"

#include <cmath>

#include "src/common/ids.h"

namespace troupe {

SimulatedNodeResources::SimulatedNodeResources(const ResourceSet& total, uint64_t seed)
    : total_(total), random_(seed) {}

ResourceSet SimulatedNodeResources::Available() const {
  absl::MutexLock lock(&mu_);
  ResourceSet available = total_;
  available -= leased_;
  available -= background_;
  return available;
}

std::optional<std::string> SimulatedNodeResources::Lease(const ResourceSet& demand) {
  absl::MutexLock lock(&mu_);
  ResourceSet available = total_;
  available -= leased_;
  available -= background_;
  if (!demand.IsSubsetOf(available)) return std::nullopt;
  std::string lease_id = LeaseId::FromRandom().Binary();
  leased_ += demand;
  leases_[lease_id] = demand;
  return lease_id;
}

bool SimulatedNodeResources::Return(const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return false;
  leased_ -= it->second;
  leases_.erase(it);
  return true;
}

void SimulatedNodeResources::RedrawBackground() {
  absl::MutexLock lock(&mu_);
  ResourceSet next;
  for (const auto& [name, amount] : total_.amounts()) {
    const int64_t room = static_cast<int64_t>(std::floor((amount - leased_.Get(name)).ToDouble()));
    if (room <= 0) continue;
    const int64_t last = static_cast<int64_t>(std::floor(background_.Get(name).ToDouble()));
    int64_t drawn;
    if (last <= room) {
      // One of the `room` amounts in [0, room] other than the last one.
      drawn = std::uniform_int_distribution<int64_t>(0, room - 1)(random_);
      if (drawn >= last) ++drawn;
    } else {  // leases took what the last draw held: any amount differs
      drawn = std::uniform_int_distribution<int64_t>(0, room)(random_);
    }
    next.Set(name, FixedPoint(static_cast<double>(drawn)));
  }
  background_ = next;
}

int SimulatedNodeResources::num_leases() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(leases_.size());
}

}  // namespace troupe
