// Placement groups: bundles of resources reserved together across nodes (gang scheduling).
//   auto pg = troupe::CreatePlacementGroup({"trainers", {{{"CPU", 1}, {"GPU", 1}},
//                                                       {{"CPU", 1}, {"GPU", 1}}},
//                                           troupe::PlacementStrategy::kStrictSpread});
//   pg.Wait(std::chrono::seconds(30));
//   troupe::Actor(Trainer::Create).SetPlacementGroup(pg, 0).Remote();
// Tasks and actors placed in a bundle use its reserved resources (their own demand must fit
// in it); removing the group frees them and kills its actors. A group lives until it is removed
// or the job that created it finishes, whichever comes first; one created with
// `.lifetime = troupe::Detached{}` outlives its job (remove it with RemovePlacementGroup or
// `troupe remove placement-group`).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "troupe/runtime.h"

namespace troupe {

// A lifetime tag: Actor(...).SetLifetime(Detached{}) and PlacementGroupOptions::lifetime make
// the actor or group outlive the job that created it (until killed or removed).
struct Detached {};

enum class PlacementStrategy { kPack = 0, kSpread = 1, kStrictPack = 2, kStrictSpread = 3 };

struct PlacementGroupOptions {
  std::string name;  // optional; unique while the group exists
  std::vector<std::map<std::string, double>> bundles;
  PlacementStrategy strategy = PlacementStrategy::kPack;
  // Unset (default): removed when the creating job finishes. Detached{}: kept until removed.
  std::optional<Detached> lifetime;
};

std::string HexOf(const std::string& binary);
namespace internal {
[[noreturn]] void ThrowNotInitialized();
}  // namespace internal

class PlacementGroup {
 public:
  PlacementGroup() = default;
  explicit PlacementGroup(std::string id) : id_(std::move(id)) {}
  // True once every bundle is reserved; false if `timeout` passes first (or it was removed).
  bool Wait(std::chrono::milliseconds timeout) const {
    internal::Runtime* runtime = internal::CurrentRuntime();
    if (runtime == nullptr) internal::ThrowNotInitialized();
    return runtime->WaitPlacementGroup(id_, timeout.count());
  }
  std::string ID() const { return HexOf(id_); }
  const std::string& binary_id() const { return id_; }
  bool IsNil() const { return id_.empty(); }

 private:
  std::string id_;
};

inline PlacementGroup CreatePlacementGroup(const PlacementGroupOptions& options) {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  return PlacementGroup(runtime->CreatePlacementGroup({options.name, options.bundles,
                                                       static_cast<int>(options.strategy),
                                                       options.lifetime.has_value()}));
}

inline void RemovePlacementGroup(const PlacementGroup& group) {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  runtime->RemovePlacementGroup(group.binary_id());
}

inline std::optional<PlacementGroup> GetPlacementGroup(const std::string& name) {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  std::string id = runtime->GetPlacementGroup(name);
  if (id.empty()) return std::nullopt;
  return PlacementGroup(id);
}

}  // namespace troupe
