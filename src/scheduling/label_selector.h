// Label selectors (proto/common.proto LabelSelector): which nodes, by their `troupe start
// --labels`, may run a task, an actor or a placement-group bundle. Pure functions over the proto,
// shared by the scheduling policy (raylets, GCS), request validation and the state views.
// Thread-safe (no state).
#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"
#include "google/protobuf/map.h"
#include "proto/common.pb.h"

namespace troupe {

// Whether `labels` satisfy every constraint of `selector` (an empty selector matches any node).
// NOT_IN and DOES_NOT_EXIST hold for a node without the key. An unknown operator never holds.
bool MatchesLabels(const rpc::LabelSelector& selector,
                   const google::protobuf::Map<std::string, std::string>& labels);
bool MatchesLabels(const rpc::LabelSelector& selector,
                   const std::map<std::string, std::string>& labels);

// "{zone=a, gpu in (h100,h200), region notin (x), ssd, !spot}" (Kubernetes' selector syntax),
// with " (soft)" after it when soft; "" for an empty selector.
std::string FormatLabelSelector(const rpc::LabelSelector& selector);

// "{zone=a, rack=r1}", or "{}" for a node without labels.
std::string FormatLabels(const std::map<std::string, std::string>& labels);

// What a daemon checks before using a selector from the wire: known operators, non-empty keys,
// the number of values each operator takes, bounded sizes. InvalidArgument naming `field` and the
// constraint otherwise. (The C++ API checks the key syntax before anything is sent.)
absl::Status ValidateLabelSelector(const std::string& field, const rpc::LabelSelector& selector);

}  // namespace troupe
