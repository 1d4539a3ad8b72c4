// NetnsCluster: a real Troupe cluster spread over N "hosts", each a network namespace made by
// scripts/netns.sh (node I has address 10.99.0.I on a subnet that exists only inside the test's
// namespaces), each with its own temp dir and, optionally, its own /dev/shm. Every node is started
// through the real `troupe` CLI with --node-ip-address: the head on node 1, workers joining it
// with the token. Commands (drivers, `troupe job submit`, ...) run on a chosen node; a node can be
// partitioned (link down/up) or killed (every process in its namespace SIGKILLed). The destructor
// (and a SIGTERM/SIGINT from a Bazel timeout) kills everything and removes the namespaces, even
// when the test failed half-way; a failed test keeps the nodes' logs among its outputs. Needs root:
// tests call Check() first and GTEST_SKIP with its reason. Not thread-safe, except RunOn, which may
// run from several threads at once (a driver in the background while the test kills a node).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tests/test_cluster.h"  // CommandResult, RunCommand, RunTroupe

namespace troupe::testing {

class NetnsCluster {
 public:
  struct Options {
    int num_nodes = 3;
    bool private_shm = false;  // a tmpfs /dev/shm per node (container-like: same kernel)
    // Extra `troupe start` flags for every node, e.g. {"--num-cpus=2"}.
    std::vector<std::string> node_flags = {"--num-cpus=2"};
  };

  // "" when network namespaces can be made here; otherwise why not (for GTEST_SKIP).
  static std::string Check();
  // Makes the namespaces and starts the head and the workers; an error carries the failing
  // command's output, and whatever did start is torn down again.
  static absl::StatusOr<std::unique_ptr<NetnsCluster>> Start(const Options& options);
  ~NetnsCluster();
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  int num_nodes() const { return static_cast<int>(node_ids_.size()); }
  // Node i (1-based) address, 10.99.0.i, and its node ID (hex) as `troupe start` printed it.
  std::string NodeIp(int i) const;
  const std::string& NodeId(int i) const { return node_ids_.at(i - 1); }
  // The head's GCS address (host:port) and HTTP API (https://host:port: the head binds beyond
  // loopback, so TLS is on by default), reachable only from inside the namespaces.
  std::string GcsAddress() const;
  std::string HttpAddress() const;
  const std::string& token() const { return token_; }
  // Node i's own temp dir (its sessions and logs).
  std::string TempDir(int i) const;

  // The CA pin the head wrote into its join_command (--ca-cert-hash=sha256:...).
  const std::string& ca_cert_hash() const { return ca_cert_hash_; }

  // Runs `argv` on node i (its network namespace and mounts) with extra environment entries, and
  // waits; once node i has started, TROUPE_TLS_DIR points at its session's TLS files (drivers and
  // the CLI there trust the cluster CA, as on a real joined machine); after `timeout_s` it is SIGKILLed (exit code 137), so a hung driver fails the test
  // instead of hanging it. Thread-safe.
  CommandResult RunOn(int i, const std::vector<std::string>& argv,
                      const std::vector<std::string>& env = {}, int timeout_s = 120) const;
  // `troupe args...` on node i (--temp-dir of node i added for start/stop/status).
  CommandResult TroupeOn(int i, std::vector<std::string> args) const;
  // `troupe status --format=json`, asked on node 1 (null when it failed).
  nlohmann::json Status() const;
  // The node's state in Status(): "ALIVE", "DEAD", or "" if not listed.
  std::string NodeState(int i) const;

  // Node i's link down (a partition: its processes keep running) or up again.
  absl::Status SetLink(int i, bool up);
  // SIGKILLs every process on node i (its raylet, workers, drivers): the host died.
  absl::Status KillNode(int i);
  // Pids of the processes running in node i's namespace.
  std::vector<int> ProcessesOn(int i) const;

 private:
  NetnsCluster(std::string prefix, std::string temp_root);
  // The `troupe start` flags of node i: every start flag the fixture uses is chosen here.
  std::vector<std::string> StartFlags(int i, const Options& options) const;
  absl::Status StartNodes(const Options& options);
  CommandResult NetnsScript(const std::vector<std::string>& args) const;

  const std::string prefix_;     // namespace prefix, unique per process and cluster
  const std::string temp_root_;  // node i lives in temp_root_/n<i>
  std::vector<std::string> node_ids_;
  std::string token_;
  std::string ca_cert_hash_;  // from the head's join_command
  bool up_ = false;  // namespaces exist
};

}  // namespace troupe::testing
