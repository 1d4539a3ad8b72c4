#include "src/scheduling/scheduling_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/scheduling/label_selector.h"

namespace troupe {
namespace {

// Highest fraction in use, over the demanded resources, after placing the demand.
double UtilisationAfter(const ResourceSet& demand, const NodeView& node) {
  double worst = 0;
  for (const auto& [name, amount] : demand.amounts()) {
    double total = node.total.Get(name).ToDouble();
    if (total <= 0) continue;
    double used = total - node.available.Get(name).ToDouble() + amount.ToDouble();
    worst = std::max(worst, used / total);
  }
  return worst;
}

SchedulingDecision Place(const NodeView& node, const NodeId& local_node) {
  SchedulingDecision decision;
  decision.kind = node.node_id == local_node ? SchedulingDecision::Kind::kLocal
                                             : SchedulingDecision::Kind::kRemote;
  decision.node_id = node.node_id;
  decision.raylet_address = node.raylet_address;
  return decision;
}

}  // namespace

std::vector<NodeView> NodeViewsFromUsage(const std::vector<rpc::ResourceUsage>& usages) {
  std::vector<NodeView> views;
  for (const auto& usage : usages) {
    auto node = NodeId::FromBinary(usage.node_id());
    auto total = ResourceSet::FromMap({usage.total().begin(), usage.total().end()});
    auto available = ResourceSet::FromMap({usage.available().begin(), usage.available().end()});
    if (node.ok() && total.ok() && available.ok()) {
      views.push_back({*node,
                       usage.raylet_address(),
                       *total,
                       *available,
                       {usage.labels().begin(), usage.labels().end()}});
    }
  }
  return views;
}

std::string DescribeInfeasible(const ResourceSet& demand, const std::vector<NodeView>& nodes) {
  std::vector<std::string> missing;
  for (const auto& [name, amount] : demand.amounts()) {
    FixedPoint largest;
    for (const auto& node : nodes) largest = std::max(largest, node.total.Get(name));
    if (largest < amount) {
      missing.push_back(absl::StrCat(name, ": ", FormatQuantity(name, amount.ToDouble()),
                                     " (largest node has ",
                                     FormatQuantity(name, largest.ToDouble()), ")"));
    }
  }
  if (missing.empty()) {
    return absl::StrCat("no single node has all of {", demand.ToString(),
                        "} at once (or the GPU share does not match a device shape)");
  }
  return absl::StrCat("no node has ", absl::StrJoin(missing, ", "));
}

std::string DescribeNodeLabels(const std::vector<NodeView>& nodes) {
  constexpr size_t kShown = 16;
  std::vector<std::string> parts;
  for (size_t i = 0; i < nodes.size() && i < kShown; ++i) {
    parts.push_back(
        absl::StrCat("node ", nodes[i].node_id.ShortHex(), " ", FormatLabels(nodes[i].labels)));
  }
  if (nodes.size() > kShown) parts.push_back(absl::StrCat("and ", nodes.size() - kShown, " more"));
  return parts.empty() ? "no nodes" : absl::StrJoin(parts, ", ");
}

namespace {

// ChooseNode without a label selector: `nodes` are the candidates.
SchedulingDecision ChooseAmong(const ResourceSet& demand, const rpc::SchedulingStrategy& strategy,
                               const NodeId& local_node, const std::vector<NodeView>& nodes,
                               uint64_t* spread_counter, double spread_threshold) {
  // Local node first, then the rest in a stable order.
  std::vector<const NodeView*> ordered;
  for (const auto& node : nodes) ordered.push_back(&node);
  std::stable_sort(ordered.begin(), ordered.end(), [&](const NodeView* a, const NodeView* b) {
    if ((a->node_id == local_node) != (b->node_id == local_node)) return a->node_id == local_node;
    return a->node_id < b->node_id;
  });
  std::vector<const NodeView*> feasible, available;
  for (const NodeView* node : ordered) {
    if (!demand.IsSubsetOf(node->total)) continue;
    feasible.push_back(node);
    if (demand.IsSubsetOf(node->available)) available.push_back(node);
  }

  if (strategy.kind() == rpc::SchedulingStrategy::NODE_AFFINITY) {
    for (const NodeView* node : feasible) {
      if (node->node_id.Binary() == strategy.node_id()) return Place(*node, local_node);
    }
    if (!strategy.soft()) {
      SchedulingDecision decision;
      const bool known = std::any_of(nodes.begin(), nodes.end(), [&](const NodeView& node) {
        return node.node_id.Binary() == strategy.node_id();
      });
      // A node that is not (yet) in the view may be joining: wait for it. One that is there but
      // can never fit the task will not change: fail.
      decision.kind =
          known ? SchedulingDecision::Kind::kFailed : SchedulingDecision::Kind::kInfeasible;
      decision.reason = absl::StrCat(
          "NodeAffinity: node ", BytesToHex(strategy.node_id()),
          known ? " can never fit {" + demand.ToString() + "}" : " is not in the cluster (yet)",
          " (soft affinity falls back to other nodes)");
      return decision;
    }
  }
  if (feasible.empty()) {
    SchedulingDecision infeasible;
    infeasible.kind = SchedulingDecision::Kind::kInfeasible;
    infeasible.reason = DescribeInfeasible(demand, nodes);
    return infeasible;
  }
  if (strategy.kind() == rpc::SchedulingStrategy::SPREAD && !available.empty()) {
    return Place(*available[(*spread_counter)++ % available.size()], local_node);
  }
  for (const NodeView* node : available) {
    if (UtilisationAfter(demand, *node) <= spread_threshold) return Place(*node, local_node);
  }
  if (!available.empty()) {
    const NodeView* best = *std::min_element(
        available.begin(), available.end(), [&](const NodeView* a, const NodeView* b) {
          return UtilisationAfter(demand, *a) < UtilisationAfter(demand, *b);
        });
    return Place(*best, local_node);
  }
  // Busy everywhere: wait where it fits, here if possible (feasible[0] is local when it fits).
  return Place(*feasible[0], local_node);
}

}  // namespace

SchedulingDecision ChooseNode(const ResourceSet& demand, const rpc::SchedulingStrategy& strategy,
                              const NodeId& local_node, const std::vector<NodeView>& nodes,
                              uint64_t* spread_counter, double spread_threshold) {
  const rpc::LabelSelector& selector = strategy.label_selector();
  if (selector.constraints().empty()) {
    return ChooseAmong(demand, strategy, local_node, nodes, spread_counter, spread_threshold);
  }
  std::vector<NodeView> matching;
  for (const NodeView& node : nodes) {
    if (MatchesLabels(selector, node.labels)) matching.push_back(node);
  }
  if (selector.soft()) {
    // A matching node that can take it now; else wherever it would go without the selector.
    if (!matching.empty()) {
      SchedulingDecision preferred =
          ChooseAmong(demand, strategy, local_node, matching, spread_counter, spread_threshold);
      for (const NodeView& node : matching) {
        if (node.node_id == preferred.node_id && demand.IsSubsetOf(node.available) &&
            (preferred.kind == SchedulingDecision::Kind::kLocal ||
             preferred.kind == SchedulingDecision::Kind::kRemote)) {
          return preferred;
        }
      }
    }
    return ChooseAmong(demand, strategy, local_node, nodes, spread_counter, spread_threshold);
  }
  const std::string what = FormatLabelSelector(selector);
  SchedulingDecision failed;
  failed.kind = SchedulingDecision::Kind::kFailed;
  if (matching.empty()) {
    failed.reason = absl::StrCat("no node matches the label selector ", what,
                                 "; the nodes' labels: ", DescribeNodeLabels(nodes),
                                 " (label nodes with `troupe start --labels`, or make the "
                                 "selector preferred, LabelMatch::kPreferred, to fall back to "
                                 "any node)");
    return failed;
  }
  if (strategy.kind() == rpc::SchedulingStrategy::NODE_AFFINITY && !strategy.soft()) {
    // Hard affinity to a node the selector excludes can never run.
    for (const NodeView& node : nodes) {
      if (node.node_id.Binary() == strategy.node_id() && !MatchesLabels(selector, node.labels)) {
        failed.reason =
            absl::StrCat("NodeAffinity: node ", node.node_id.ShortHex(), " ",
                         FormatLabels(node.labels), " does not match the label selector ", what);
        return failed;
      }
    }
  }
  const bool fits_somewhere = std::any_of(matching.begin(), matching.end(), [&](const NodeView& n) {
    return demand.IsSubsetOf(n.total);
  });
  if (!fits_somewhere) {
    failed.reason = absl::StrCat("no node matching the label selector ", what, " can fit {",
                                 demand.ToString(), "}: ", DescribeInfeasible(demand, matching),
                                 "; the nodes' labels: ", DescribeNodeLabels(nodes));
    return failed;
  }
  return ChooseAmong(demand, strategy, local_node, matching, spread_counter, spread_threshold);
}

namespace {

// AssignBundles with `allowed[b][n]`: whether bundle b may go on node n (labels).
BundleAssignment AssignAllowed(const std::vector<ResourceSet>& bundles,
                               rpc::PlacementGroupInfo::Strategy strategy,
                               const std::vector<NodeView>& nodes,
                               const std::vector<NodeId>& excluded,
                               const std::vector<std::vector<bool>>& allowed) {
  BundleAssignment result;
  std::vector<ResourceSet> free;
  std::vector<bool> usable;
  for (const auto& node : nodes) {
    free.push_back(node.available);
    usable.push_back(std::find(excluded.begin(), excluded.end(), node.node_id) == excluded.end());
  }
  auto allows_all = [&](size_t n) {
    for (const auto& bundle : allowed) {
      if (!bundle[n]) return false;
    }
    return true;
  };
  auto pack_on_one = [&]() {
    ResourceSet sum;
    for (const auto& bundle : bundles) sum += bundle;
    for (size_t n = 0; n < nodes.size(); ++n) {
      if (usable[n] && allows_all(n) && sum.IsSubsetOf(free[n])) {
        result.node_of_bundle.assign(bundles.size(), static_cast<int>(n));
        return true;
      }
    }
    result.reason = absl::StrCat("no node has {", sum.ToString(), "} free for all ", bundles.size(),
                                 " bundles together");
    return false;
  };
  if (strategy == rpc::PlacementGroupInfo::STRICT_PACK) {
    result.ok = pack_on_one();
    return result;
  }
  if (strategy == rpc::PlacementGroupInfo::PACK && pack_on_one()) {
    result.ok = true;
    return result;
  }
  const bool distinct = strategy == rpc::PlacementGroupInfo::STRICT_SPREAD ||
                        strategy == rpc::PlacementGroupInfo::SPREAD;
  std::vector<bool> used(nodes.size(), false);
  result.node_of_bundle.assign(bundles.size(), -1);
  for (size_t b = 0; b < bundles.size(); ++b) {
    int chosen = -1;
    for (int pass = 0; pass < 2 && chosen < 0; ++pass) {
      // Pass 0 avoids nodes already holding a bundle (for spreading); pass 1 allows them,
      // except under STRICT_SPREAD.
      if (pass == 1 && strategy == rpc::PlacementGroupInfo::STRICT_SPREAD) break;
      for (size_t n = 0; n < nodes.size() && chosen < 0; ++n) {
        if (!usable[n] || !allowed[b][n] || (pass == 0 && distinct && used[n])) continue;
        if (bundles[b].IsSubsetOf(free[n])) chosen = static_cast<int>(n);
      }
    }
    if (chosen < 0) {
      result.reason = strategy == rpc::PlacementGroupInfo::STRICT_SPREAD
                          ? absl::StrCat("STRICT_SPREAD needs ", bundles.size(),
                                         " different nodes with room for a bundle each; bundle ", b,
                                         " {", bundles[b].ToString(), "} finds none left")
                          : absl::StrCat("bundle ", b, " {", bundles[b].ToString(),
                                         "} fits on no node with free resources");
      result.node_of_bundle.clear();
      return result;
    }
    free[chosen] -= bundles[b];
    used[chosen] = true;
    result.node_of_bundle[b] = chosen;
  }
  result.ok = true;
  return result;
}

}  // namespace

BundleAssignment AssignBundles(const std::vector<ResourceSet>& bundles,
                               rpc::PlacementGroupInfo::Strategy strategy,
                               const std::vector<NodeView>& nodes,
                               const std::vector<NodeId>& excluded,
                               const std::vector<rpc::LabelSelector>& selectors) {
  // allowed[b][n], with soft selectors counted (first try) or not.
  auto allowed = [&](bool with_soft) {
    std::vector<std::vector<bool>> out(bundles.size(), std::vector<bool>(nodes.size(), true));
    for (size_t b = 0; b < bundles.size() && b < selectors.size(); ++b) {
      if (selectors[b].soft() && !with_soft) continue;
      for (size_t n = 0; n < nodes.size(); ++n) {
        out[b][n] = MatchesLabels(selectors[b], nodes[n].labels);
      }
    }
    return out;
  };
  const bool any_soft = std::any_of(selectors.begin(), selectors.end(), [](const auto& s) {
    return s.soft() && !s.constraints().empty();
  });
  BundleAssignment result = AssignAllowed(bundles, strategy, nodes, excluded, allowed(true));
  if (!result.ok && any_soft) {
    result = AssignAllowed(bundles, strategy, nodes, excluded, allowed(false));
  }
  if (!result.ok) {
    // A hard selector no node matches at all says so (the usual reason is about room).
    for (size_t b = 0; b < bundles.size() && b < selectors.size(); ++b) {
      if (selectors[b].soft() || selectors[b].constraints().empty()) continue;
      const bool matched = std::any_of(nodes.begin(), nodes.end(), [&](const NodeView& node) {
        return MatchesLabels(selectors[b], node.labels);
      });
      if (!matched) {
        result.reason =
            absl::StrCat("bundle ", b, "'s label selector ", FormatLabelSelector(selectors[b]),
                         " matches no node; the nodes' labels: ", DescribeNodeLabels(nodes));
        break;
      }
    }
  }
  return result;
}

}  // namespace troupe
