#include "src/common/gpu_devices.h"

#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace troupe {

std::string VisibleDevicesForLease(absl::string_view gpu_ids, const char* raylet_visible) {
  if (raylet_visible == nullptr || *raylet_visible == '\0') return std::string(gpu_ids);
  std::vector<std::string> visible = absl::StrSplit(raylet_visible, ',');
  std::vector<std::string> out;
  for (absl::string_view id : absl::StrSplit(gpu_ids, ',')) {
    size_t index = 0;
    const bool known = absl::SimpleAtoi(id, &index) && index < visible.size();
    out.push_back(known ? visible[index] : std::string(id));
  }
  return absl::StrJoin(out, ",");
}

std::string ChildVisibleDevices(absl::string_view gpu_ids, const char* visibility,
                                const char* own_visible) {
  if (gpu_ids.empty()) return "";
  const bool masked = visibility != nullptr && std::strcmp(visibility, "assigned") == 0;
  if (masked && own_visible != nullptr && *own_visible != '\0') return own_visible;
  return VisibleDevicesForLease(gpu_ids, own_visible);
}

}  // namespace troupe
