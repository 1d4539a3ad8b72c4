// The flags that describe what a node offers (--num-cpus, --num-gpus, --resources, --memory,
// --object-store-memory, --labels). Both `troupe start` (which checks them before starting any
// daemon) and `troupe raylet` (which uses them) declare them through this one struct. What is
// not given is detected with src/raylet/node_resources.h.
// Value type; not thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/common/flag_parser.h"
#include "src/common/resources.h"

namespace troupe {

struct NodeFlags {
  double num_cpus = -1;  // -1: detect
  double num_gpus = -1;  // -1: detect
  std::string resources_json;
  int64_t memory = -1;
  int64_t object_store_memory = -1;
  std::string labels_json;
  // "all": GPU workers see every GPU of the node (CUDA_VISIBLE_DEVICES untouched) and learn
  // theirs from TROUPE_GPU_IDS, so NCCL can reach peer devices; "assigned": CUDA_VISIBLE_DEVICES
  // is masked to the worker's GPUs (Ray's default).
  std::string gpu_visibility = "all";

  void Register(FlagParser* parser);
  // The node's total resources, detecting what was not given. InvalidArgument names the flag.
  // When GPUs are detected, *gpu_note (if given) says what was found or why there are none.
  absl::StatusOr<ResourceSet> BuildResources(std::string* gpu_note = nullptr) const;
  absl::StatusOr<std::map<std::string, std::string>> BuildLabels() const;
  // The flags as given, to pass on to `troupe raylet`.
  std::vector<std::string> ToArgs() const;
};

}  // namespace troupe
