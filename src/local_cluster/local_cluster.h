// LocalCluster: a GCS (in-memory storage) and one head raylet running inside this process, for a
// driver that names no cluster and finds none running on its machine (see troupe/api.h). Linking
// //src/local_cluster registers StartLocalCluster with the client runtime
// (src/api/embedded_cluster.h); programs that only join running clusters do not link it, and so
// carry no daemon code. The raylet runs on a thread this object owns; its workers are child
// processes of this executable. Owned by the driver's session; Stop (or the destructor) stops the
// raylet, then the GCS, and removes the session directory. Thread-safety: Stop and the
// destructor are called from one thread.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "src/api/embedded_cluster.h"
#include "src/gcs/gcs_server.h"
#include "src/raylet/raylet.h"

namespace troupe {

class LocalCluster final : public internal::EmbeddedCluster {
 public:
  // Starts both daemons on free loopback ports with a fresh cluster token and session directory.
  // The node offers what `config` asks (num_cpus, num_gpus, resources, object_store_memory;
  // -1: detect). Keeps this process's log output to warnings and above.
  static absl::StatusOr<std::unique_ptr<internal::EmbeddedCluster>> Start(const Config& config);
  ~LocalCluster() override { Stop(); }

  const std::string& gcs_address() const override { return gcs_address_; }
  const std::string& token() const override { return token_; }
  void Stop() override;

 private:
  LocalCluster() = default;

  std::string gcs_address_;
  std::string token_;
  std::string session_dir_;  // removed by Stop
  std::unique_ptr<GcsServer> gcs_;
  std::unique_ptr<Raylet> raylet_;
  std::thread raylet_thread_;
};

}  // namespace troupe
