#include "src/raylet/local_resources.h"

#include <algorithm>
#include <cmath>

namespace troupe {
namespace {
const FixedPoint kOne(1.0);
}  // namespace

std::vector<int> Allocation::GpuIds() const {
  std::vector<int> ids;
  for (const auto& [device, share] : gpu_shares) ids.push_back(device);
  return ids;
}

LocalResources::LocalResources(const ResourceSet& total) : total_(total), available_(total) {
  // 2.5 GPUs: devices 0 and 1 whole, device 2 with half its capacity.
  FixedPoint gpus = total.Get(kGpu);
  while (gpus >= kOne) {
    gpu_free_.push_back(kOne);
    gpus -= kOne;
  }
  if (gpus > FixedPoint()) gpu_free_.push_back(gpus);
}

bool LocalResources::GpuShapeFits(FixedPoint demand, const std::vector<FixedPoint>& free) const {
  if (demand <= FixedPoint()) return true;
  if (demand >= kOne) {
    if (demand.raw() % kOne.raw() != 0) return false;  // 1.5 GPUs: not a device shape
    int64_t whole = 0;
    for (FixedPoint f : free) whole += f == kOne;
    return whole >= demand.raw() / kOne.raw();
  }
  for (FixedPoint f : free) {
    if (f >= demand) return true;
  }
  return false;
}

bool LocalResources::IsFeasible(const ResourceSet& demand) const {
  if (!demand.IsSubsetOf(total_)) return false;
  std::vector<FixedPoint> all_free;
  FixedPoint gpus = total_.Get(kGpu);
  while (gpus >= kOne) {
    all_free.push_back(kOne);
    gpus -= kOne;
  }
  if (gpus > FixedPoint()) all_free.push_back(gpus);
  return GpuShapeFits(demand.Get(kGpu), all_free);
}

std::optional<Allocation> LocalResources::Allocate(const ResourceSet& demand) {
  if (!demand.IsSubsetOf(available_)) return std::nullopt;
  const FixedPoint gpu_demand = demand.Get(kGpu);
  if (!GpuShapeFits(gpu_demand, gpu_free_)) return std::nullopt;
  Allocation allocation;
  allocation.resources = demand;
  if (gpu_demand >= kOne) {
    int64_t needed = gpu_demand.raw() / kOne.raw();
    for (size_t device = 0; device < gpu_free_.size() && needed > 0; ++device) {
      if (gpu_free_[device] == kOne) {
        gpu_free_[device] = FixedPoint();
        allocation.gpu_shares.emplace_back(static_cast<int>(device), kOne);
        --needed;
      }
    }
  } else if (gpu_demand > FixedPoint()) {
    // Best fit: the device with the least free capacity that still fits.
    int best = -1;
    for (size_t device = 0; device < gpu_free_.size(); ++device) {
      if (gpu_free_[device] >= gpu_demand && (best < 0 || gpu_free_[device] < gpu_free_[best])) {
        best = static_cast<int>(device);
      }
    }
    gpu_free_[best] -= gpu_demand;
    allocation.gpu_shares.emplace_back(best, gpu_demand);
  }
  available_ -= demand;
  return allocation;
}

void LocalResources::AddCpus(FixedPoint cpus) {
  const FixedPoint repaid = std::min(cpus, cpu_debt_);
  cpu_debt_ -= repaid;
  available_.Set(kCpu, available_.Get(kCpu) + cpus - repaid);
}

void LocalResources::Free(const Allocation& allocation) {
  ResourceSet others = allocation.resources;
  others.Set(kCpu, FixedPoint());
  available_ += others;
  AddCpus(allocation.resources.Get(kCpu));
  for (const auto& [device, share] : allocation.gpu_shares) gpu_free_[device] += share;
}

void LocalResources::ReleaseCpus(const Allocation& allocation) {
  AddCpus(allocation.resources.Get(kCpu));
}

void LocalResources::ReacquireCpus(const Allocation& allocation) {
  const FixedPoint wanted = allocation.resources.Get(kCpu);
  const FixedPoint free = available_.Get(kCpu);
  const FixedPoint taken = std::min(wanted, free);
  available_.Set(kCpu, free - taken);
  cpu_debt_ += wanted - taken;  // over-subscribed until enough CPUs come back
}

}  // namespace troupe
