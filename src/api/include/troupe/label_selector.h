// troupe::LabelSelector: which nodes, by the labels they were started with (`troupe start
// --labels '{"zone": "a"}'`), may run a task, an actor or a placement-group bundle:
//
//   troupe::Task(Train)
//       .SetLabelSelector(troupe::LabelSelector().Equals("zone", "a").In("gpu", {"h100", "h200"}))
//       .Remote();
//
// Every condition must hold. NotIn and DoesNotExist hold for a node without the key (as in
// Kubernetes and Ray). Required (the default): only matching nodes; when no node of the cluster
// matches, or none that matches can ever fit the resources, the task fails (TaskFailedError) and
// the actor dies (ActorDiedError) with a message naming the selector and every node's labels.
// Preferred (LabelMatch::kPreferred, Ray's fallback to no selector): a matching node with room
// now, else any node that fits. docs/api.md, "Label scheduling".
//
// Keys and values are checked when added, in Kubernetes' label syntax (a key is an optional DNS
// prefix and '/' then a name of 1-63 characters: letters, digits, '-', '_', '.', beginning and
// ending with a letter or digit; a value is such a name): a bad one, or an empty In/NotIn list,
// throws InvalidArgumentError naming the key and what is wrong, before anything is sent.
// A value type; not synchronized.
#pragma once

#include <string>
#include <vector>

#include "troupe/runtime.h"

namespace troupe {

// Whether a label selector is a requirement (kRequired, the default) or a preference
// (kPreferred: matching nodes first, any node that fits otherwise).
enum class LabelMatch { kRequired, kPreferred };

class LabelSelector {
 public:
  // The node has label `key` with this value.
  LabelSelector& Equals(const std::string& key, const std::string& value);
  // The node has label `key` with one of `values` (at least one).
  LabelSelector& In(const std::string& key, const std::vector<std::string>& values);
  // The node has no label `key`, or one with none of `values` (at least one).
  LabelSelector& NotIn(const std::string& key, const std::vector<std::string>& values);
  // The node has label `key`, whatever its value.
  LabelSelector& Exists(const std::string& key);
  // The node has no label `key`.
  LabelSelector& DoesNotExist(const std::string& key);

  bool empty() const { return constraints_.empty(); }
  // "{zone=a, gpu in (h100,h200), region notin (x), ssd, !spot}", as errors and `troupe list`
  // show it.
  std::string ToString() const;
  const std::vector<internal::LabelConstraint>& constraints() const { return constraints_; }

 private:
  LabelSelector& Add(internal::LabelConstraint::Op op, const std::string& key,
                     std::vector<std::string> values);
  std::vector<internal::LabelConstraint> constraints_;
};

}  // namespace troupe
