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

#include "troupe/errors.h"
#include "troupe/label_selector.h"
#include "troupe/runtime.h"

namespace troupe {

// A lifetime tag: Actor(...).SetLifetime(Detached{}) and PlacementGroupOptions::lifetime make
// the actor or group outlive the job that created it (until killed or removed).
struct Detached {};

enum class PlacementStrategy { kPack = 0, kSpread = 1, kStrictPack = 2, kStrictSpread = 3 };

// kPending: waiting for nodes with room; kCreated: every bundle reserved; kRescheduling: a node
// holding a bundle died and the group is being placed again; kRemoved: removed (by
// RemovePlacementGroup, `troupe remove placement-group`, or the end of its job).
enum class PlacementGroupState { kPending, kCreated, kRescheduling, kRemoved };

// A placement group as the GCS knows it now (a copy; read it again for a newer state).
struct PlacementGroupInfo {
  std::string id;  // hex, as `troupe list placement-groups` prints it
  std::string name;
  PlacementStrategy strategy = PlacementStrategy::kPack;
  PlacementGroupState state = PlacementGroupState::kPending;
  std::vector<std::map<std::string, double>> bundles;
  std::vector<std::string> bundle_node_ids;  // hex, one per bundle; "" while not reserved
  std::string pending_reason;                // why it waits (kPending, kRescheduling)
  std::string creator_job_id;                // hex
  bool detached = false;
};

struct PlacementGroupOptions {
  std::string name;  // optional; unique while the group exists
  std::vector<std::map<std::string, double>> bundles;
  PlacementStrategy strategy = PlacementStrategy::kPack;
  // Unset (default): removed when the creating job finishes. Detached{}: kept until removed.
  std::optional<Detached> lifetime;
  // Empty, or one per bundle (an empty selector: any node): the nodes each bundle may be reserved
  // on. A group that no set of nodes can host stays pending, its reason naming the selector.
  std::vector<LabelSelector> bundle_label_selectors;
  LabelMatch bundle_label_match = LabelMatch::kRequired;
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
  // The group as the GCS knows it now. Throws InvalidArgumentError if the GCS does not know it
  // (a nil handle, or an ID from another cluster).
  PlacementGroupInfo Info() const {
    internal::Runtime* runtime = internal::CurrentRuntime();
    if (runtime == nullptr) internal::ThrowNotInitialized();
    std::optional<PlacementGroupInfo> info = runtime->GetPlacementGroupInfo(id_);
    if (!info) {
      throw InvalidArgumentError("placement group '" + ID() + "' is not known to the cluster");
    }
    return *std::move(info);
  }
  PlacementGroupState State() const { return Info().state; }

 private:
  std::string id_;
};

inline PlacementGroup CreatePlacementGroup(const PlacementGroupOptions& options) {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  if (!options.bundle_label_selectors.empty() &&
      options.bundle_label_selectors.size() != options.bundles.size()) {
    throw InvalidArgumentError(
        "PlacementGroupOptions: " + std::to_string(options.bundle_label_selectors.size()) +
        " bundle_label_selectors for " + std::to_string(options.bundles.size()) +
        " bundles; give one per bundle (an empty LabelSelector() for any node), or none");
  }
  internal::PlacementGroupSpec spec{options.name, options.bundles,
                                    static_cast<int>(options.strategy),
                                    options.lifetime.has_value()};
  for (const LabelSelector& selector : options.bundle_label_selectors) {
    spec.bundle_label_selectors.push_back(selector.constraints());
  }
  spec.bundle_labels_soft = options.bundle_label_match == LabelMatch::kPreferred;
  return PlacementGroup(runtime->CreatePlacementGroup(spec));
}

inline void RemovePlacementGroup(const PlacementGroup& group) {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  runtime->RemovePlacementGroup(group.binary_id());
}

// Every placement group of the cluster, removed ones included (until the GCS forgets them).
inline std::vector<PlacementGroupInfo> ListPlacementGroups() {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  return runtime->ListPlacementGroups();
}

// The group with this ID (hex, as PlacementGroup::ID() and `troupe list placement-groups` give
// it), if the GCS knows it (removed ones too: check State()). Throws InvalidArgumentError for a
// string that is not a placement group ID.
std::optional<PlacementGroup> GetPlacementGroupById(const std::string& hex_id);

// The live (not removed) group named `name`, if any. Names are unique in the cluster while their
// group exists (placement groups have no namespaces).
inline std::optional<PlacementGroup> GetPlacementGroup(const std::string& name) {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  std::string id = runtime->GetPlacementGroup(name);
  if (id.empty()) return std::nullopt;
  return PlacementGroup(id);
}

}  // namespace troupe
