#include "src/api/embedded_cluster.h"

#include <atomic>

namespace troupe::internal {
namespace {
// Constant-initialized, so registration from another file's static initializer is safe.
std::atomic<EmbeddedClusterStarter> registered_starter{nullptr};
}  // namespace

bool RegisterEmbeddedClusterStarter(EmbeddedClusterStarter starter) {
  registered_starter.store(starter);
  return true;
}

EmbeddedClusterStarter RegisteredEmbeddedClusterStarter() { return registered_starter.load(); }

}  // namespace troupe::internal
