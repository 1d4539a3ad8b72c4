// Where code runs and what the cluster has: troupe::GetRuntimeContext() in the driver, a task
// and an actor; troupe::Nodes(), ClusterResources(), AvailableResources(); a remote function
// taking a non-const reference; a named actor call (`troupe list tasks --filter name=restock`).
//   bazel run //examples/tasks:context            (an embedded cluster, or TROUPE_ADDRESS)
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "troupe/api.h"

std::string Describe(const troupe::RuntimeContext& context) {
  std::ostringstream out;
  out << "job=" << context.job_id << " node=" << context.node_id.substr(0, 8)
      << " task=" << (context.task_id.empty() ? "-" : context.task_id.substr(0, 8))
      << " actor=" << (context.actor_id.empty() ? "-" : context.actor_id.substr(0, 8))
      << " namespace=" << context.namespace_name << " resources={";
  for (const auto& [name, amount] : context.assigned_resources) out << name << ":" << amount << " ";
  out << "}";
  if (!context.placement_group_id.empty()) {
    out << " group=" << context.placement_group_id.substr(0, 8)
        << " bundle=" << context.bundle_index;
  }
  if (context.was_current_actor_restarted) out << " (restarted)";
  return out.str();
}

std::string WhereAmI() { return Describe(troupe::GetRuntimeContext()); }

// Takes a non-const reference: it changes its own copy, never the caller's vector.
int AppendAndSum(std::vector<int>& values, int extra) {
  values.push_back(extra);
  int sum = 0;
  for (int v : values) sum += v;
  return sum;
}

class Shelf {
 public:
  static Shelf* Create() { return new Shelf; }
  int Restock(std::vector<int>& items) {
    for (int item : items) count_ += item;
    items.clear();
    return count_;
  }
  std::string WhereAmI() { return Describe(troupe::GetRuntimeContext()); }

 private:
  int count_ = 0;
};

TROUPE_REMOTE(WhereAmI, AppendAndSum, Shelf::Create, &Shelf::Restock, &Shelf::WhereAmI);

int main(int argc, char** argv) {
  troupe::Init(argc, argv);  // code above this line also runs in every worker
  for (const troupe::NodeInfo& node : troupe::Nodes()) {
    std::cout << "node " << node.node_id.substr(0, 8) << " " << node.node_ip
              << (node.is_head ? " head" : "") << (node.alive ? " alive" : " dead") << "\n";
  }
  for (const auto& [name, amount] : troupe::ClusterResources()) {
    std::cout << "cluster " << name << ": " << amount << " (free "
              << troupe::AvailableResources()[name] << ")\n";
  }
  std::cout << "driver: " << Describe(troupe::GetRuntimeContext()) << "\n";
  std::cout << "task:   "
            << *troupe::Get(troupe::Task(WhereAmI).SetResources({{"CPU", 0.5}}).Remote()) << "\n";

  std::vector<int> values = {1, 2, 3};
  std::cout << "AppendAndSum(values, 4) = "
            << *troupe::Get(troupe::Task(AppendAndSum).Remote(values, 4))
            << "; the caller's values still have " << values.size() << " items\n";

  auto shelf = troupe::Actor(Shelf::Create).SetResources({{"CPU", 1}}).Remote();
  std::cout << "actor:  " << *troupe::Get(shelf.Task(&Shelf::WhereAmI).Remote()) << "\n";
  std::cout << "restocked to "
            << *troupe::Get(shelf.Task(&Shelf::Restock).SetName("restock").Remote(values))
            << " (shown as \"restock\" in `troupe list tasks`)\n";

  auto group = troupe::CreatePlacementGroup({"", {{{"CPU", 1}}}});
  if (group.Wait(std::chrono::seconds(10))) {
    std::cout << "in a placement group: "
              << *troupe::Get(troupe::Task(WhereAmI).SetPlacementGroup(group).Remote()) << "\n";
    troupe::RemovePlacementGroup(group);
  }
  troupe::Shutdown();
  return 0;
}
