// The gRPC services of one simulated node (simulated_nodes.h), both on the node's own port:
//  - SimulatedNodeService, its NodeManagerService (what the GCS, the CLI and callers ask a
//    raylet): health checks, node stats, and worker leases — a lease request is granted when
//    its demand fits in the node's available resources (SimulatedNodeResources) and refused
//    otherwise with no message, as a real raylet answers after a spillback, so the caller starts
//    over at its own raylet. Every request is treated as grant-or-reject (no queue, no
//    spillback of its own); placement-group bundles are refused. A granted lease names the
//    node's own port as its worker's address: there is no worker process. A lease is held until
//    returned (ReturnWorker, KillLeasedWorker): the lease of a caller that dies without
//    returning it is not reclaimed, as a real raylet would on the caller's death.
//  - SimulatedWorkerService, the CoreWorkerService of that pretend worker: PushTask and
//    PushTasks answer each task after `task_run_time` (a PushTasks batch's results all come
//    together when its last task ends; calls in flight together overlap, where a real worker
//    runs them one after another), without running anything: the task's one return value
//    is msgpack nil, inline. No task events are sent to the GCS and nothing reaches an object
//    store, so a real worker's per-task GCS work is missing from what these tasks cost.
// Both borrow the node's resources, the counters and the DelayedRunner (owned by
// SimulatedNodes, which outlive the servers). Handlers run on gRPC's callback threads; answers
// that wait for a run time are finished on the DelayedRunner's thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/raylet.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "src/raylet/simulated_node_resources.h"
#include "src/rpc/auth.h"

namespace troupe {

// Runs closures at their time, one after another, on one thread of its own. Stop() runs what is
// still waiting at once (so every gRPC call it holds gets its answer) and joins the thread;
// nothing may be added after. Thread-safe.
class DelayedRunner {
 public:
  DelayedRunner();
  ~DelayedRunner();
  void RunAt(absl::Time when, std::function<void()> closure);
  void Stop();

 private:
  void Loop();
  absl::Mutex mu_;
  absl::CondVar changed_;
  std::multimap<absl::Time, std::function<void()>> waiting_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// What every simulated node's services did, summed over the nodes.
struct SimulatedNodeCounters {
  std::atomic<int64_t> leases_granted{0};
  std::atomic<int64_t> leases_refused{0};
  std::atomic<int64_t> leases_returned{0};
  std::atomic<int64_t> tasks_run{0};
};

class SimulatedNodeService : public rpc::NodeManagerService::CallbackService {
 public:
  SimulatedNodeService(const TokenAuthenticator* auth, rpc::NodeInfo node,
                       SimulatedNodeResources* resources, SimulatedNodeCounters* counters)
      : auth_(auth), node_(std::move(node)), resources_(resources), counters_(counters) {}
  // Once the port is bound, before the node registers (no call can come before that).
  void set_raylet_port(int port) { node_.set_raylet_port(port); }

  grpc::ServerUnaryReactor* HealthCheck(grpc::CallbackServerContext* context,
                                        const rpc::HealthCheckRequest*,
                                        rpc::HealthCheckReply* reply) override;
  grpc::ServerUnaryReactor* GetNodeStats(grpc::CallbackServerContext* context,
                                         const rpc::GetNodeStatsRequest*,
                                         rpc::GetNodeStatsReply* reply) override;
  grpc::ServerUnaryReactor* RequestWorkerLease(grpc::CallbackServerContext* context,
                                               const rpc::RequestWorkerLeaseRequest* request,
                                               rpc::RequestWorkerLeaseReply* reply) override;
  grpc::ServerUnaryReactor* ReturnWorker(grpc::CallbackServerContext* context,
                                         const rpc::ReturnWorkerRequest* request,
                                         rpc::ReturnWorkerReply* reply) override;
  grpc::ServerUnaryReactor* KillLeasedWorker(grpc::CallbackServerContext* context,
                                             const rpc::KillLeasedWorkerRequest* request,
                                             rpc::KillLeasedWorkerReply* reply) override;

 private:
  const TokenAuthenticator* auth_;
  rpc::NodeInfo node_;  // set before the node registers, read-only once calls can come
  SimulatedNodeResources* resources_;
  SimulatedNodeCounters* counters_;
};

class SimulatedWorkerService : public rpc::CoreWorkerService::CallbackService {
 public:
  SimulatedWorkerService(const TokenAuthenticator* auth, std::string node_id,
                         absl::Duration task_run_time, DelayedRunner* runner,
                         SimulatedNodeCounters* counters)
      : auth_(auth),
        node_id_(std::move(node_id)),
        task_run_time_(task_run_time),
        runner_(runner),
        counters_(counters) {}
  // Once the port is bound (the address answers carry).
  void set_address(std::string address) { address_ = std::move(address); }

  grpc::ServerUnaryReactor* PushTask(grpc::CallbackServerContext* context,
                                     const rpc::PushTaskRequest* request,
                                     rpc::PushTaskReply* reply) override;
  grpc::ServerWriteReactor<rpc::PushTaskResults>* PushTasks(
      grpc::CallbackServerContext* context, const rpc::PushTasksRequest* request) override;

 private:
  // The answer of a task that "ran": its return value (msgpack nil) and this worker's address.
  // InvalidArgument for a task ID that does not parse.
  absl::Status Answer(const rpc::TaskSpec& task, rpc::PushTaskReply* reply) const;

  const TokenAuthenticator* auth_;
  const std::string node_id_;  // binary
  const absl::Duration task_run_time_;
  DelayedRunner* runner_;
  SimulatedNodeCounters* counters_;
  std::string address_;  // set before the node registers
};

}  // namespace troupe
