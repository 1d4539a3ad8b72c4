// TestCluster: a real Troupe cluster for multi-process tests — a head and any number of worker
// nodes on loopback, each with its own ports, all started through the real `troupe` CLI under a
// private temp root, and stopped (SIGKILL) when the TestCluster is destroyed.
// Not thread-safe; one test thread drives it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "src/rpc/gcs_client.h"

namespace troupe::testing {

struct CommandResult {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

// The troupe binary from the test's runfiles.
std::string TroupeBinary();
// Runs `troupe args...` with extra environment entries ("NAME=value") and waits for it.
CommandResult RunTroupe(const std::vector<std::string>& args,
                        const std::vector<std::string>& env = {});
// A TCP port that was free a moment ago.
int PickFreePort();
// Pids of processes whose command line contains `marker`.
std::vector<int> ProcessesMentioning(const std::string& marker);
// The NUL-separated arguments of a running process (empty if it is gone).
std::vector<std::string> CommandLineOf(int pid);

// The node with that ID (hex) in `troupe status --format=json` output, or null.
nlohmann::json FindNode(const nlohmann::json& status, const std::string& node_id);

class TestCluster {
 public:
  // Starts a head with `head_flags` (e.g. {"--num-cpus=2"}). CHECK-fails the test on error.
  explicit TestCluster(const std::vector<std::string>& head_flags = {});
  ~TestCluster();

  // Starts a worker node; returns its node ID (hex).
  std::string AddWorker(const std::vector<std::string>& flags = {});
  // `troupe status --format json` of this cluster.
  nlohmann::json Status();
  // Runs a troupe command against this cluster (--temp-dir is added for start/stop/status).
  CommandResult Troupe(std::vector<std::string> args);

  GcsClient& gcs() { return *gcs_; }
  const std::string& gcs_address() const { return gcs_address_; }
  const std::string& token() const { return token_; }
  const std::string& temp_root() const { return temp_root_; }
  // The session directory of the head.
  std::string HeadSessionDir() const;
  // http://127.0.0.1:PORT of the head's HTTP server (start the cluster with
  // "--http-port=<PickFreePort()>"); "" without one.
  std::string HttpAddress() const;
  // Paths of every raylet log of this cluster.
  std::vector<std::string> RayletLogs() const;
  // The pid of the head's GCS process (from its pid file), 0 if unknown.
  int GcsPid() const;

 private:
  std::string temp_root_;
  std::string gcs_address_;
  std::string token_;
  std::unique_ptr<GcsClient> gcs_;
};

}  // namespace troupe::testing
