// A node's resources as its raylet hands them out: what is free, and which GPU devices each
// grant gets. GPUs are devices 0..n-1; a demand of one or more GPUs takes whole free devices, a
// fractional demand (0.5) takes a share of one device (best fit), so several fractional grants
// pack onto one GPU. Not thread-safe: the lease manager calls it under its lock.
#pragma once

#include <optional>
#include <vector>

#include "src/common/resources.h"

namespace troupe {

struct Allocation {
  ResourceSet resources;
  std::vector<std::pair<int, FixedPoint>> gpu_shares;  // (device, share of it)

  std::vector<int> GpuIds() const;
};

class LocalResources {
 public:
  explicit LocalResources(const ResourceSet& total);

  // Takes `demand` if it is free now.
  std::optional<Allocation> Allocate(const ResourceSet& demand);
  void Free(const Allocation& allocation);
  // Gives back / takes again the CPUs of a grant whose worker is blocked waiting on objects.
  // Taking them again may over-subscribe the node for a while (that is what lets nested tasks
  // finish instead of deadlocking).
  void ReleaseCpus(const Allocation& allocation);
  void ReacquireCpus(const Allocation& allocation);

  // Whether `demand` could ever fit on this node (ignoring what is in use).
  bool IsFeasible(const ResourceSet& demand) const;
  const ResourceSet& total() const { return total_; }
  const ResourceSet& available() const { return available_; }

 private:
  bool GpuShapeFits(FixedPoint demand, const std::vector<FixedPoint>& free) const;

  // Adds CPUs back, first paying off CPUs taken beyond the total by ReacquireCpus.
  void AddCpus(FixedPoint cpus);

  ResourceSet total_;
  ResourceSet available_;
  FixedPoint cpu_debt_;  // CPUs in use beyond the total (over-subscription after unblocking)
  std::vector<FixedPoint> gpu_free_;  // per device
};

}  // namespace troupe
