// Label scheduling, placement groups read back, and the public KV, on a cluster whose nodes carry
// labels:
//   troupe start --head --num-cpus=2
//   troupe start --address=HEAD:PORT --num-cpus=2 --labels='{"zone": "a", "gpu": "h100"}'
//   bazel run //examples/tasks:labels
// Prints where each task and actor ran, what a selector no node matches says, the groups of the
// cluster and what the KV holds; counts its runs in KV namespace "examples" (`troupe list actors
// --format json` shows the actor's label_selector).
#include <cstdlib>
#include <iostream>

#include "troupe/api.h"

std::string WhereAmI() { return std::getenv("TROUPE_NODE_ID"); }

class Pinned {
 public:
  static Pinned* Create() { return new Pinned(); }
  std::string Node() { return std::getenv("TROUPE_NODE_ID"); }
};

TROUPE_REMOTE(WhereAmI, Pinned::Create, &Pinned::Node);

int main(int argc, char** argv) {
  troupe::Init(argc, argv);
  for (const troupe::NodeInfo& node : troupe::Nodes()) {
    std::cout << "node " << node.node_id.substr(0, 8) << " labels:";
    for (const auto& [key, value] : node.labels) std::cout << " " << key << "=" << value;
    std::cout << "\n";
  }
  auto in_a = troupe::LabelSelector().Equals("zone", "a");
  std::cout << "zone=a task ran on "
            << troupe::Get(troupe::Task(WhereAmI).SetLabelSelector(in_a).Remote())->substr(0, 8)
            << "\n";
  auto not_a = troupe::LabelSelector().NotIn("zone", {"a"});
  std::cout << "zone notin (a) task ran on "
            << troupe::Get(troupe::Task(WhereAmI).SetLabelSelector(not_a).Remote())->substr(0, 8)
            << "\n";
  try {
    troupe::Get(troupe::Task(WhereAmI)
                    .SetLabelSelector(troupe::LabelSelector().Equals("zone", "x"))
                    .Remote());
  } catch (const troupe::TroupeError& e) {
    std::cout << "zone=x: " << e.what() << "\n";
  }
  auto actor = troupe::Actor(Pinned::Create)
                   .SetLabelSelector(troupe::LabelSelector().In("gpu", {"h100", "h200"}))
                   .Remote();
  std::cout << "gpu in (h100,h200) actor lives on "
            << troupe::Get(actor.Task(&Pinned::Node).Remote())->substr(0, 8) << "\n";

  troupe::PlacementGroupOptions options;
  options.name = "zone-x";
  options.bundles = {{{"CPU", 1}}};
  options.bundle_label_selectors = {troupe::LabelSelector().Equals("zone", "x")};
  auto group = troupe::CreatePlacementGroup(options);
  group.Wait(std::chrono::seconds(2));
  for (const troupe::PlacementGroupInfo& info : troupe::ListPlacementGroups()) {
    const char* states[] = {"pending", "created", "rescheduling", "removed"};
    std::cout << "group " << info.name << " " << info.id.substr(0, 8) << " "
              << states[static_cast<int>(info.state)] << " " << info.pending_reason << "\n";
  }
  troupe::RemovePlacementGroup(group);

  troupe::kv::PutOptions shared;
  shared.ns = "examples";
  bool added = troupe::kv::Put("runs", "1", shared);
  if (!added) {
    int runs = std::stoi(*troupe::kv::Get("runs", "examples")) + 1;
    troupe::kv::Put("runs", std::to_string(runs), shared);
  }
  std::cout << "runs so far (kv namespace 'examples'): " << *troupe::kv::Get("runs", "examples")
            << "\n";
  try {
    troupe::kv::Put("", "x");
  } catch (const troupe::InvalidArgumentError& e) {
    std::cout << "empty key: " << e.what() << "\n";
  }
  actor.Kill();
  troupe::Shutdown();
}
