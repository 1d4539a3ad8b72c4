// Resource quantities and sets: CPU, GPU, memory, object_store_memory and custom resources.
// Quantities are fixed point with 1/10000 granularity, so 0.1 GPU taken ten times is exactly one
// GPU (doubles drift). Value types; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace troupe {

inline constexpr char kCpu[] = "CPU";
inline constexpr char kGpu[] = "GPU";
inline constexpr char kMemory[] = "memory";
inline constexpr char kObjectStoreMemory[] = "object_store_memory";

class FixedPoint {
 public:
  static constexpr int64_t kScale = 10000;

  FixedPoint() = default;
  // Rounds to the nearest 1/kScale.
  explicit FixedPoint(double value);
  static FixedPoint FromRaw(int64_t raw) {
    FixedPoint f;
    f.raw_ = raw;
    return f;
  }

  double ToDouble() const { return static_cast<double>(raw_) / kScale; }
  int64_t raw() const { return raw_; }

  FixedPoint operator+(FixedPoint o) const { return FromRaw(raw_ + o.raw_); }
  FixedPoint operator-(FixedPoint o) const { return FromRaw(raw_ - o.raw_); }
  FixedPoint& operator+=(FixedPoint o) {
    raw_ += o.raw_;
    return *this;
  }
  FixedPoint& operator-=(FixedPoint o) {
    raw_ -= o.raw_;
    return *this;
  }
  bool operator==(FixedPoint o) const { return raw_ == o.raw_; }
  bool operator!=(FixedPoint o) const { return raw_ != o.raw_; }
  bool operator<(FixedPoint o) const { return raw_ < o.raw_; }
  bool operator<=(FixedPoint o) const { return raw_ <= o.raw_; }
  bool operator>(FixedPoint o) const { return raw_ > o.raw_; }
  bool operator>=(FixedPoint o) const { return raw_ >= o.raw_; }

 private:
  int64_t raw_ = 0;
};

// A map from resource name to a non-negative quantity; absent names mean zero, and zero
// quantities are never stored.
class ResourceSet {
 public:
  ResourceSet() = default;
  // Fails on negative or non-finite quantities, naming the resource.
  static absl::StatusOr<ResourceSet> FromMap(const std::map<std::string, double>& amounts);
  // Parses a JSON object such as {"CPU": 2, "accelerator_x": 0.5} (the --resources flag).
  static absl::StatusOr<ResourceSet> FromJson(const std::string& json);

  void Set(const std::string& name, FixedPoint amount);
  FixedPoint Get(const std::string& name) const;
  bool IsEmpty() const { return amounts_.empty(); }

  // True if every quantity in this set is <= the same quantity in `other`.
  bool IsSubsetOf(const ResourceSet& other) const;
  ResourceSet& operator+=(const ResourceSet& other);
  // Subtracts; quantities that would go below zero become zero (callers check IsSubsetOf first).
  ResourceSet& operator-=(const ResourceSet& other);
  bool operator==(const ResourceSet& other) const { return amounts_ == other.amounts_; }

  std::map<std::string, double> ToMap() const;
  const std::map<std::string, FixedPoint>& amounts() const { return amounts_; }
  // "CPU: 2, GPU: 0.5, memory: 1.5GiB" — memory-like resources in human units.
  std::string ToString() const;

 private:
  std::map<std::string, FixedPoint> amounts_;
};

// Checks what a task, an actor or a placement-group bundle asks for, before it is submitted:
// every name non-empty; every amount finite, >= 0 and at most 1e14; a positive amount not
// below the 1/10000 granularity (it would round to nothing); and GPUs above one whole (a
// fraction of one device, 0.5, is fine; 1.5 fits no device shape, so no node could ever run
// it). InvalidArgument naming `field`, the resource and the bad value, and what is allowed,
// e.g. "task resources['GPU'] is 1.5; more than one GPU must be a whole number of GPUs".
absl::Status CheckResourceDemand(const std::string& field,
                                 const std::map<std::string, double>& demand);

// True for resources counted in bytes (memory, object_store_memory).
bool IsByteResource(const std::string& name);
// 1536 -> "1.5KiB"; used by status output.
std::string FormatBytes(double bytes);
// Formats one quantity the way `troupe status` shows it (bytes in human units, others as numbers).
std::string FormatQuantity(const std::string& name, double value);

}  // namespace troupe
