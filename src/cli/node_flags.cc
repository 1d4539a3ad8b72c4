#include "src/cli/node_flags.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "src/raylet/node_resources.h"

namespace troupe {

void NodeFlags::Register(FlagParser* parser) {
  parser->AddDouble("num-cpus", &num_cpus, "CPUs this node offers (-1: the number of cores).");
  parser->AddDouble("num-gpus", &num_gpus,
                    "GPUs this node offers (-1: devices the CUDA runtime sees, 0 without CUDA). "
                    "May be set by hand, e.g. to test GPU scheduling on a CPU machine.");
  parser->AddString("resources", &resources_json,
                    "Custom resources as a JSON object, e.g. '{\"accel\": 2, \"ssd\": 1}'.");
  parser->AddBytes("memory", &memory, "Schedulable memory in bytes, e.g. 8GiB (-1: 70% of RAM).");
  parser->AddBytes("object-store-memory", &object_store_memory,
                   "Object store size in bytes, e.g. 2GiB (-1: 30% of RAM, at most /dev/shm).");
  parser->AddString("gpu-visibility", &gpu_visibility,
                    "Which GPUs a GPU worker sees: 'all' (every GPU of the node; TROUPE_GPU_IDS "
                    "names its own, and NCCL can reach its peers' devices) or 'assigned' "
                    "(CUDA_VISIBLE_DEVICES masked to its own).");
  parser->AddString("labels", &labels_json,
                    "Node labels as a JSON object of strings, e.g. '{\"zone\": \"a\"}'.");
}

absl::StatusOr<ResourceSet> NodeFlags::BuildResources(std::string* gpu_note) const {
  ResourceSet resources;
  if (!resources_json.empty()) {
    auto custom = ResourceSet::FromJson(resources_json);
    if (!custom.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--resources: ", custom.status().message()));
    }
    for (const char* builtin : {kCpu, kGpu, kMemory, kObjectStoreMemory}) {
      if (custom->Get(builtin) > FixedPoint()) {
        return absl::InvalidArgumentError(absl::StrCat("--resources must not set '", builtin,
                                                       "'; use --num-cpus, --num-gpus, --memory or "
                                                       "--object-store-memory"));
      }
    }
    resources = *custom;
  }
  if (num_cpus < 0 && num_cpus != -1) {
    return absl::InvalidArgumentError("--num-cpus must be >= 0");
  }
  if (num_gpus < 0 && num_gpus != -1) return absl::InvalidArgumentError("--num-gpus must be >= 0");
  // A node offers whole CPUs (tasks may ask for fractions of one).
  if (num_cpus != std::floor(num_cpus)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num-cpus must be a whole number, got ", num_cpus,
                     ": a node offers whole CPUs (tasks and actors may ask for fractions of one)"));
  }
  if (gpu_visibility != "all" && gpu_visibility != "assigned") {
    return absl::InvalidArgumentError("--gpu-visibility must be 'all' or 'assigned', got '" +
                                      gpu_visibility + "'");
  }
  if (memory < -1) return absl::InvalidArgumentError("--memory must be >= 0");
  if (object_store_memory < -1) {
    return absl::InvalidArgumentError("--object-store-memory must be >= 0");
  }
  resources.Set(kCpu, FixedPoint(num_cpus >= 0 ? num_cpus : DetectNumCpus()));
  if (num_gpus >= 0) {
    resources.Set(kGpu, FixedPoint(num_gpus));
  } else {
    std::string why_none;
    int gpus = DetectNumGpus(&why_none);
    if (gpu_note != nullptr) {
      *gpu_note = gpus == 0 ? absl::StrCat("no GPUs detected: ", why_none)
                            : absl::StrCat(gpus, " GPU(s) detected");
    }
    resources.Set(kGpu, FixedPoint(gpus));
  }
  resources.Set(kMemory,
                FixedPoint(static_cast<double>(memory >= 0 ? memory : DefaultMemoryBytes())));
  resources.Set(kObjectStoreMemory,
                FixedPoint(static_cast<double>(
                    object_store_memory >= 0 ? object_store_memory : DefaultObjectStoreBytes())));
  return resources;
}

absl::StatusOr<std::map<std::string, std::string>> NodeFlags::BuildLabels() const {
  std::map<std::string, std::string> labels;
  if (labels_json.empty()) return labels;
  nlohmann::json parsed = nlohmann::json::parse(labels_json, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--labels must be a JSON object of strings, like '{\"zone\": \"a\"}'; got '",
                     labels_json, "'"));
  }
  for (const auto& [key, value] : parsed.items()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--labels: label '", key, "' must be a string, got ", value.dump()));
    }
    labels[key] = value.get<std::string>();
  }
  return labels;
}

std::vector<std::string> NodeFlags::ToArgs() const {
  std::vector<std::string> args;
  if (num_cpus >= 0) args.push_back(absl::StrFormat("--num-cpus=%.17g", num_cpus));
  if (num_gpus >= 0) args.push_back(absl::StrFormat("--num-gpus=%.17g", num_gpus));
  if (memory >= 0) args.push_back(absl::StrCat("--memory=", memory));
  if (object_store_memory >= 0) {
    args.push_back(absl::StrCat("--object-store-memory=", object_store_memory));
  }
  if (!resources_json.empty()) args.push_back(absl::StrCat("--resources=", resources_json));
  if (!labels_json.empty()) args.push_back(absl::StrCat("--labels=", labels_json));
  if (gpu_visibility != "all") args.push_back("--gpu-visibility=" + gpu_visibility);
  return args;
}

}  // namespace troupe
