#include "src/common/mutex_settings.h"

#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace troupe {

void UseProductionMutexSettings() {
  const char* keep = std::getenv("TROUPE_MUTEX_DEADLOCK_DETECTION");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace troupe
