// TestCluster: a real Troupe cluster for multi-process tests — a head and any number of worker
// nodes on loopback, each with its own ports, all started through the real `troupe` CLI under a
// private temp root, and stopped (SIGKILL) when the TestCluster is destroyed. Starting returns
// absl::Status (the test ASSERTs it), so a cluster that did not start ends the test at once.
// Not thread-safe; one test thread drives it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "src/rpc/gcs_client.h"
#include "tests/free_port.h"  // PickFreePort, used with clusters

namespace troupe::testing {

struct CommandResult {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

// The troupe binary from the test's runfiles.
std::string TroupeBinary();
// Runs argv[0] (a path) with `argv` and extra environment entries ("NAME=value", replacing an
// inherited NAME), stdin from /dev/null, and waits for it; the output is kept in files under
// $TEST_TMPDIR.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env = {});
// Runs `troupe args...` with extra environment entries (as RunCommand) and waits for it.
CommandResult RunTroupe(const std::vector<std::string>& args,
                        const std::vector<std::string>& env = {});
// Runs `argv` (argv[0] a path, at most 8 arguments) if the test is killed by SIGTERM or SIGINT
// (a Bazel timeout), so that what it started does not outlive it; for every cluster or set of
// namespaces a test makes. Call from the test thread.
void RegisterCleanupCommand(const std::vector<std::string>& argv);
// Pids of processes whose command line contains `marker`.
std::vector<int> ProcessesMentioning(const std::string& marker);
// The NUL-separated arguments of a running process (empty if it is gone).
std::vector<std::string> CommandLineOf(int pid);

// The node with that ID (hex) in `troupe status --format=json` output, or null.
nlohmann::json FindNode(const nlohmann::json& status, const std::string& node_id);

class TestCluster {
 public:
  // Starts a head with `head_flags` (e.g. {"--num-cpus=2"}). An error carries the CLI's output;
  // whatever did start is stopped again. In a test:
  //   ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  // so a cluster that did not start stops the test at once instead of failing everything after.
  static absl::StatusOr<TestCluster> Start(const std::vector<std::string>& head_flags = {});
  // Moves the cluster; the moved-from object owns nothing and its destructor does nothing.
  TestCluster(TestCluster&& other) noexcept;
  TestCluster& operator=(TestCluster&&) = delete;
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;
  // Checks that every alive node has all its resources available again (nothing leaked), then
  // stops every process of the cluster (SIGKILL) and checks none is left.
  ~TestCluster();

  // Starts a worker node; returns its node ID (hex), or why it did not start (the CLI's output).
  //   ASSERT_OK_AND_ASSIGN(std::string node, cluster.AddWorker({"--num-cpus=1"}));
  //   ASSERT_OK(cluster.AddWorker());
  absl::StatusOr<std::string> AddWorker(const std::vector<std::string>& flags = {});
  // `troupe status --format json` of this cluster.
  nlohmann::json Status();
  // Runs a troupe command against this cluster (--temp-dir is added for start/stop/status).
  CommandResult Troupe(std::vector<std::string> args);

  GcsClient& gcs() { return *gcs_; }
  const std::string& gcs_address() const { return gcs_address_; }
  const std::string& token() const { return token_; }
  const std::string& temp_root() const { return temp_root_; }
  // The head's TLS folder (ca.pem, node.pem, ...) when the head runs TLS (e.g. "--tls=on"), else
  // "". While such a cluster lives, this process and the commands it runs use it: Start sets
  // $TROUPE_TLS_DIR and this process's transport security (one TLS cluster at a time per test
  // process); the destructor clears both.
  const std::string& tls_dir() const { return tls_dir_; }
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
  explicit TestCluster(std::string temp_root);

  std::string temp_root_;  // "" once moved from
  std::string gcs_address_;
  std::string token_;
  std::string tls_dir_;
  std::unique_ptr<GcsClient> gcs_;  // set once the head is up
};

}  // namespace troupe::testing
