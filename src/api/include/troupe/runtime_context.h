// Where the calling code runs and what the cluster offers: troupe::GetRuntimeContext() (the job,
// node, task and actor this code runs in, what it holds), troupe::Nodes(),
// troupe::ClusterResources() and troupe::AvailableResources(). Values, not live views: each call
// reads the current state; nothing here keeps a reference into the runtime.
// Thread-safety: every function may be called from any thread after Init (in a driver) or inside
// a task or actor call (in a worker); GetRuntimeContext describes the task running on the calling
// thread. Each throws RuntimeError when Troupe is not initialized.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "troupe/runtime.h"

namespace troupe {

namespace internal {
[[noreturn]] void ThrowNotInitialized();
}  // namespace internal

// IDs are hex, as `troupe status` and `troupe list` print them.
struct RuntimeContext {
  std::string job_id;
  std::string node_id;         // the node this process runs on
  std::string task_id;         // the task or actor call running on this thread; "" in a driver
  std::string actor_id;        // the actor this process holds; "" outside an actor
  std::string namespace_name;  // where GetActor looks and named actors are created
  // What the running task holds (its SetResources), or for an actor call what its actor holds;
  // empty in a driver. Inside a placement group these come out of the group's bundle.
  std::map<std::string, double> assigned_resources;
  std::vector<int> gpu_ids;        // GetGpuIds(): the GPUs leased to this worker
  std::string placement_group_id;  // the group the task or actor runs in; "" for none
  int bundle_index = -1;           // its bundle in that group (resolved when it asked for any)
  bool was_current_actor_restarted = false;  // inside an actor: this instance is a restart

  bool IsDriver() const { return task_id.empty(); }
  bool IsActor() const { return !actor_id.empty(); }
};

// A node of the cluster as the GCS knows it (alive, or dead and not yet forgotten).
struct NodeInfo {
  std::string node_id;
  std::string node_ip;
  std::string hostname;
  bool alive = false;
  bool is_head = false;
  std::map<std::string, double> total_resources;
  // What is free, as the node last reported it (every 100 ms or so); empty for a dead node.
  std::map<std::string, double> available_resources;
  std::map<std::string, std::string> labels;  // `troupe start --labels`
  std::string death_reason;                   // why it is dead; "" while alive
};

inline RuntimeContext GetRuntimeContext() {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  return runtime->GetRuntimeContext();
}

// Every node the GCS knows: the head first, then alive before dead, by start time.
inline std::vector<NodeInfo> Nodes() {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  return runtime->Nodes();
}

// What the alive nodes offer in total, summed by resource name ({"CPU": 8, "GPU": 2, ...}).
inline std::map<std::string, double> ClusterResources() {
  std::map<std::string, double> total;
  for (const NodeInfo& node : Nodes()) {
    if (!node.alive) continue;
    for (const auto& [name, amount] : node.total_resources) total[name] += amount;
  }
  return total;
}

// What the alive nodes have free right now (as last reported), summed by resource name.
// A resource fully in use is listed with 0.
inline std::map<std::string, double> AvailableResources() {
  std::map<std::string, double> free;
  for (const NodeInfo& node : Nodes()) {
    if (!node.alive) continue;
    for (const auto& [name, amount] : node.total_resources) free[name] += 0;
    for (const auto& [name, amount] : node.available_resources) free[name] += amount;
  }
  return free;
}

}  // namespace troupe
