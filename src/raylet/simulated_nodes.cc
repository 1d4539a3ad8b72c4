#include "src/raylet/simulated_nodes.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "proto/raylet.grpc.pb.h"
#include "src/common/logging.h"
#include "src/rpc/auth.h"
#include "src/rpc/cluster_token.h"
#include "src/raylet/simulated_node_reporter.h"
#include "src/rpc/gcs_client.h"
#include "src/rpc/server.h"

namespace troupe {

struct SimulatedNodes::Node {
  Node(const SimulatedNodesOptions& options, const ClusterToken& token, const ResourceSet& total,
       uint64_t seed)
      : id(NodeId::FromRandom()),
        gcs(options.gcs_address, options.token, absl::Seconds(10)),
        reporter(options.gcs_address, options.token),
        auth(token),
        resources(total, seed) {}

  const NodeId id;
  GcsClient gcs;
  SimulatedNodeReporter reporter;
  TokenAuthenticator auth;
  SimulatedNodeResources resources;
  std::unique_ptr<SimulatedNodeService> service;
  std::unique_ptr<SimulatedWorkerService> worker;
  std::unique_ptr<grpc::Server> server;
  rpc::NodeInfo info;
  int64_t report_seq = 0;        // the reporting thread's
  int64_t view_version = 0;      // the reporting thread's
  ResourceSet last_reported;     // the reporting thread's; the total until the first report
  absl::Time next_report;        // the reporting thread's
  std::atomic<bool> gone{false};  // killed, stopped, or declared dead
  absl::Mutex poll_mu;
  std::function<void()> cancel_poll ABSL_GUARDED_BY(poll_mu);  // of the poll in flight
  uint64_t poll_generation ABSL_GUARDED_BY(poll_mu) = 0;
};

SimulatedNodes::SimulatedNodes(SimulatedNodesOptions options) : options_(std::move(options)) {}

SimulatedNodes::~SimulatedNodes() { Shutdown(); }

const NodeId& SimulatedNodes::node_id(int index) const { return nodes_.at(index)->id; }

ResourceSet SimulatedNodes::available(int index) const {
  return nodes_.at(index)->resources.Available();
}

absl::Status SimulatedNodes::Start() {
  auto token = ClusterToken::Parse(options_.token);
  if (!token.ok()) return token.status();
  auto total = ResourceSet::FromMap(options_.resources);
  if (!total.ok()) return total.status();
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  for (int i = 0; i < options_.num_nodes; ++i) {
    auto node = std::make_unique<Node>(options_, *token, *total, options_.seed + i);
    node->last_reported = *total;  // what the GCS assumes of a node that just registered
    node->info.set_node_id(node->id.Binary());
    node->info.set_node_ip(options_.node_ip);
    node->info.set_hostname(hostname);
    node->info.set_raylet_pid(getpid());
    for (const auto& [name, amount] : options_.resources) {
      (*node->info.mutable_resources_total())[name] = amount;
    }
    (*node->info.mutable_labels())["troupe.simulated"] = "true";
    int port = 0;
    // The node's info (with its port) is what the service answers with: made once bound.
    auto service = std::make_unique<SimulatedNodeService>(&node->auth, node->info, &node->resources,
                                                          &counters_);
    auto worker = std::make_unique<SimulatedWorkerService>(
        &node->auth, node->id.Binary(), options_.task_run_time, &runner_, &counters_);
    auto server = StartGrpcServer(options_.node_ip, 0, {service.get(), worker.get()}, &port);
    if (!server.ok()) {
      Shutdown();
      return server.status();
    }
    node->info.set_raylet_port(port);
    service->set_raylet_port(port);
    worker->set_address(absl::StrCat(options_.node_ip, ":", port));
    node->service = std::move(service);
    node->worker = std::move(worker);
    node->server = std::move(*server);
    nodes_.push_back(std::move(node));
  }
  for (auto& node : nodes_) {
    rpc::RegisterNodeRequest request;
    *request.mutable_node() = node->info;
    if (auto reply = node->gcs.RegisterNode(request); !reply.ok()) {
      Shutdown();
      return absl::Status(reply.status().code(),
                          absl::StrCat("registering simulated node ", node->id.ShortHex(), ": ",
                                       reply.status().message()));
    }
  }
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    // Staggered over one period, as independent raylets would be.
    nodes_[i]->next_report = now + options_.report_period * (static_cast<double>(i) / nodes_.size());
    PollFrom(nodes_[i].get(), -1);
  }
  for (int t = 0; t < std::max(1, options_.report_threads); ++t) {
    report_threads_.emplace_back([this, t] { ReportLoop(t); });
  }
  return absl::OkStatus();
}

void SimulatedNodes::ReportLoop(int thread_index) {
  const int stride = std::max(1, options_.report_threads);
  while (!stop_.HasBeenNotified()) {
    absl::Time next = absl::Now() + options_.report_period;
    for (size_t i = thread_index; i < nodes_.size(); i += stride) {
      Node* node = nodes_[i].get();
      if (node->gone.load()) continue;
      if (node->next_report <= absl::Now()) {
        ReportOnce(node);
        // A raylet waits a period after each report: one that fell behind does not catch up
        // with a burst.
        node->next_report =
            std::max(node->next_report + options_.report_period, absl::Now());
      }
      next = std::min(next, node->next_report);
    }
    stop_.WaitForNotificationWithTimeout(std::max(absl::ZeroDuration(), next - absl::Now()));
  }
}

void SimulatedNodes::ReportOnce(Node* node) {
  if (options_.churn) node->resources.RedrawBackground();
  const ResourceSet available = node->resources.Available();
  rpc::ResourceUsage usage;
  usage.set_node_id(node->id.Binary());
  *usage.mutable_total() = node->info.resources_total();
  for (const auto& [name, amount] : available.ToMap()) (*usage.mutable_available())[name] = amount;
  usage.set_report_seq(++node->report_seq);
  // Like a raylet, it sends the view version it holds and gets only what changed since; it keeps
  // no copy of the view itself (it schedules nothing), so it does not parse the entries.
  auto reply = node->reporter.Report(usage, node->view_version);
  if (reply.ok()) {
    node->view_version = reply->view_version;
    ++reports_ok_;
    if (!(available == node->last_reported)) ++reports_changed_;
    node->last_reported = available;
    view_entries_received_ += reply->entries;
    return;
  }
  ++reports_failed_;
  if (reply.status().code() == absl::StatusCode::kFailedPrecondition) {
    node->gone = true;  // declared dead: a raylet would exit
  } else if (reply.status().code() == absl::StatusCode::kNotFound) {
    rpc::RegisterNodeRequest request;  // the GCS restarted without this node: join again
    *request.mutable_node() = node->info;
    (void)node->gcs.RegisterNode(request);
    node->view_version = 0;
  }
}

void SimulatedNodes::PollFrom(Node* node, int64_t cursor) {
  if (node->gone.load() || stop_.HasBeenNotified()) return;
  rpc::PollRequest request;
  request.set_after_seq(cursor);
  request.add_channels(rpc::JOB_CHANNEL);
  request.add_channels(rpc::NODE_CHANNEL);
  request.add_channels(rpc::WORKER_CHANNEL);
  request.set_timeout_ms(cursor < 0 ? 0 : absl::ToInt64Milliseconds(options_.poll_timeout));
  {
    absl::MutexLock lock(&mu_);
    ++polls_in_flight_;
  }
  uint64_t generation;
  {
    absl::MutexLock lock(&node->poll_mu);
    generation = ++node->poll_generation;
  }
  std::function<void()> cancel = node->gcs.PollAsync(
      request, [this, node, cursor](absl::StatusOr<rpc::PollReply> reply) {
        int64_t next = cursor;
        if (reply.ok()) {
          next = reply->last_seq();
          for (const auto& message : reply->messages()) {
            if (message.channel() != rpc::NODE_CHANNEL ||
                message.node().state() != rpc::NodeInfo::DEAD) {
              continue;
            }
            if (auto dead = NodeId::FromBinary(message.node().node_id()); dead.ok()) {
              OnDeathSeen(*dead);
            }
          }
        } else {
          absl::SleepFor(absl::Milliseconds(100));  // the GCS is away: do not spin
        }
        PollFrom(node, next);
        absl::MutexLock lock(&mu_);
        if (--polls_in_flight_ == 0) death_seen_cv_.SignalAll();
      });
  // The reply may already have come and the next poll started: keep the newest one's cancel.
  absl::MutexLock lock(&node->poll_mu);
  if (node->poll_generation == generation) node->cancel_poll = std::move(cancel);
}

void SimulatedNodes::OnDeathSeen(const NodeId& node) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  if (death_seen_at_.emplace(node, now).second) death_seen_cv_.SignalAll();
}

NodeId SimulatedNodes::Kill(int index) {
  Node* node = nodes_.at(index).get();
  {
    absl::MutexLock lock(&mu_);
    killed_at_[node->id] = absl::Now();
  }
  node->gone = true;
  {
    absl::MutexLock lock(&node->poll_mu);
    if (node->cancel_poll) node->cancel_poll();
  }
  node->server->Shutdown(absl::ToChronoTime(absl::Now()));
  return node->id;
}

std::optional<absl::Duration> SimulatedNodes::WaitDeathPublished(const NodeId& node,
                                                                 absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (!death_seen_at_.contains(node)) {
    if (death_seen_cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  auto seen = death_seen_at_.find(node);
  auto killed = killed_at_.find(node);
  if (seen == death_seen_at_.end() || killed == killed_at_.end()) return std::nullopt;
  return seen->second - killed->second;
}

void SimulatedNodes::Stop() {
  for (auto& node : nodes_) {
    if (node->gone.exchange(true)) continue;
    (void)node->gcs.UnregisterNode(node->id.Binary(), "the node simulator stopped");
  }
  Shutdown();
}

void SimulatedNodes::Shutdown() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  for (auto& thread : report_threads_) thread.join();
  report_threads_.clear();
  for (auto& node : nodes_) {
    node->gone = true;
    absl::MutexLock lock(&node->poll_mu);
    if (node->cancel_poll) node->cancel_poll();
  }
  {
    absl::MutexLock lock(&mu_);
    while (polls_in_flight_ > 0) death_seen_cv_.Wait(&mu_);
  }
  for (auto& node : nodes_) {
    if (node->server) node->server->Shutdown(absl::ToChronoTime(absl::Now()));
  }
  nodes_.clear();
  runner_.Stop();  // after the servers: the answers they wait for still come
}

}  // namespace troupe
