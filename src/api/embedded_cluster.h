// The seam between the client runtime and the embedded local cluster. //src/api links no daemon:
// a program that wants Init() without an address to start a GCS and a raylet inside itself links
// //src/local_cluster, which registers its starter here at static-initialization time. Without
// it, Init() with no address and no $TROUPE_ADDRESS fails with a message naming that target.
// Thread-safety: registration happens before main(); lookups are thread-safe afterwards.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "troupe/api.h"

namespace troupe::internal {

// A GCS and a raylet running inside this process, owned by the driver's session.
class EmbeddedCluster {
 public:
  virtual ~EmbeddedCluster() = default;
  // host:port of the GCS, and the cluster token text.
  virtual const std::string& gcs_address() const = 0;
  virtual const std::string& token() const = 0;
  // Stops the raylet, then the GCS. Called by Shutdown after the driver's core worker stopped.
  virtual void Stop() = 0;
};

// Starts a cluster whose node offers what `config` asks (num_cpus, num_gpus, resources,
// object_store_memory; -1: detect). The error says which daemon failed and why.
using EmbeddedClusterStarter =
    absl::StatusOr<std::unique_ptr<EmbeddedCluster>> (*)(const Config& config);

// Installs the starter (the last registration wins). Returns true, for use in a static
// initializer.
bool RegisterEmbeddedClusterStarter(EmbeddedClusterStarter starter);
// The registered starter, or nullptr when //src/local_cluster is not linked.
EmbeddedClusterStarter RegisteredEmbeddedClusterStarter();

}  // namespace troupe::internal
