// SimulatedNodes: N lightweight stand-ins for raylets in one process, for scale tests and
// bench/scale_bench.py. Each simulated node does against the real GCS, over gRPC, what a raylet
// does to stay in the cluster: it serves NodeManagerService on a port of its own (health checks,
// node stats, worker leases), registers with the GCS through GcsClient, reports its resources
// every `report_period` (staggered over the period), and keeps a long poll open on the NODE, JOB
// and WORKER channels like a raylet's job follower. Nothing of the GCS is mocked: its
// registration, report, health-check, scheduling and pubsub paths all run as they do for real
// raylets, and the head's raylet places tasks on simulated nodes by spillback as on real ones.
// What a simulated node does NOT do (simulated_node_services.h): it runs no workers and no
// object store. A lease whose demand fits in its available resources is granted with a pretend
// worker served on the node's own port, which answers each pushed task after `task_run_time`
// with a nil return value, running nothing and sending no task events; the caller then returns
// the lease as to any raylet. A lease that does not fit is refused (never queued).
// Churn (`churn`): before every report each node redraws a background load standing for work
// that comes and goes (SimulatedNodeResources), so its reported available resources differ from
// its last report and the GCS applies a change, and hands it to every other reporter, on every
// report — the condition of a busy cluster. Without churn a node's resources change only with
// the leases it grants (an idle cluster: every report repeats the last, the GCS's best case).
// Each node keeps only the view version the GCS gave it (it schedules nothing): it receives the
// changed entries in every reply as a raylet does, but counts them on the wire instead of
// parsing them (simulated_node_reporter.h), so the simulator does not spend the GCS's machine's
// CPU on the parsing a thousand real raylets would do on their own machines.
// Kill(i) makes node i vanish as a SIGKILLed raylet does (its server closes, its reports and
// polls stop, it does not unregister); the other nodes' polls then time when its death reaches
// them. Destroying the object (or killing the process) without Stop() leaves every node to be
// found dead by the GCS's health checks.
// Thread-safety: Start, Kill, Stop and the accessors from one controlling thread; reports run on
// `report_threads` threads of this object, polls and lease/push calls on gRPC's callback
// threads, delayed task answers on one thread of this object.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "src/common/ids.h"
#include "src/raylet/simulated_node_services.h"

namespace troupe {

struct SimulatedNodesOptions {
  std::string gcs_address;
  std::string token;            // the cluster token text
  int num_nodes = 20;
  std::string node_ip = "127.0.0.1";
  std::map<std::string, double> resources = {{"CPU", 1}};
  absl::Duration report_period = absl::Milliseconds(500);  // a raylet's default
  int report_threads = 4;
  // How long a node's pubsub poll waits at the GCS (a raylet's job follower waits 1 s).
  absl::Duration poll_timeout = absl::Seconds(1);
  // Redraw each node's background load before every report (see above).
  bool churn = false;
  // How long the pretend worker of a granted lease takes to answer a task.
  absl::Duration task_run_time = absl::Milliseconds(10);
  uint64_t seed = 1;  // of the background draws (node i draws from seed + i)
};

class SimulatedNodes {
 public:
  explicit SimulatedNodes(SimulatedNodesOptions options);
  // Stops reporting and polling and closes the servers, without unregistering.
  ~SimulatedNodes();
  SimulatedNodes(const SimulatedNodes&) = delete;
  SimulatedNodes& operator=(const SimulatedNodes&) = delete;

  // Starts every node's server, registers every node and starts reports and polls. Fails (and
  // leaves nothing running) when a server cannot start or a registration is refused.
  absl::Status Start();
  // Node i vanishes without unregistering (as a SIGKILLed raylet). Returns its node ID.
  NodeId Kill(int index);
  // Waits until a poll of a live node delivered the DEAD message of `node`, up to `timeout`;
  // returns the time from Kill() to that delivery.
  std::optional<absl::Duration> WaitDeathPublished(const NodeId& node, absl::Duration timeout);
  // Unregisters every live node (a graceful leave) and stops everything.
  void Stop();

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const NodeId& node_id(int index) const;
  // Reports the GCS answered, and reports it refused or failed, since Start.
  int64_t reports_ok() const { return reports_ok_.load(); }
  int64_t reports_failed() const { return reports_failed_.load(); }
  // Answered reports whose available resources differed from the node's last report: each one
  // a change the GCS applied to its view (a new view version).
  int64_t reports_changed() const { return reports_changed_.load(); }
  // Node entries the GCS's replies carried to the nodes (the changes it handed out; full views
  // included), summed over every answered report.
  int64_t view_entries_received() const { return view_entries_received_.load(); }
  const SimulatedNodeCounters& counters() const { return counters_; }
  // A node's available resources now (what its next report says, before any redraw).
  ResourceSet available(int index) const;

 private:
  struct Node;
  void ReportLoop(int thread_index);
  void ReportOnce(Node* node);
  void PollFrom(Node* node, int64_t cursor);
  void OnDeathSeen(const NodeId& node);
  void Shutdown();

  SimulatedNodesOptions options_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::thread> report_threads_;
  absl::Notification stop_;
  std::atomic<int64_t> reports_ok_{0};
  std::atomic<int64_t> reports_failed_{0};
  std::atomic<int64_t> reports_changed_{0};
  std::atomic<int64_t> view_entries_received_{0};
  SimulatedNodeCounters counters_;
  // Answers the pretend workers' tasks; outlives every server (stopped after they shut down).
  DelayedRunner runner_;

  absl::Mutex mu_;
  absl::CondVar death_seen_cv_;
  absl::flat_hash_map<NodeId, absl::Time> killed_at_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<NodeId, absl::Time> death_seen_at_ ABSL_GUARDED_BY(mu_);
  int polls_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace troupe
