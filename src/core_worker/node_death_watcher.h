// How a core worker learns that the GCS declared a node dead: it follows the GCS's NODE channel
// (long polls) and reports each dead node once, so the submitters fail over the tasks and actor
// calls in flight there and fence the node off (task_submitter.h, actor_task_submitter.h), and
// the object service stops reading copies from it. Without this, a node cut off by a partition
// keeps its callers' Gets waiting: a silent peer resets no connection.
// The GCS calls are injected (the core worker passes GcsClient::PollAsync and GetAllNodeInfo),
// so the logic is tested with fakes (node_death_watcher_test.cc).
// Owned by CoreWorker. Thread-safe: Run() loops on one thread (the caller's) until Stop(), which
// any thread may call; `on_dead` runs on the Run() thread, without the lock held.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/gcs.pb.h"
#include "src/common/ids.h"

namespace troupe {

class NodeDeathWatcher {
 public:
  using PollDone = std::function<void(absl::StatusOr<rpc::PollReply>)>;
  // Starts a poll; `done` runs once, on any thread; the returned function cancels it.
  using PollAsync = std::function<std::function<void()>(const rpc::PollRequest&, PollDone)>;
  using ListNodes = std::function<absl::StatusOr<std::vector<rpc::NodeInfo>>()>;
  // A dead node: its ID and its raylet's address ("ip:port").
  using OnDead = std::function<void(const NodeId&, const std::string& raylet_address)>;

  struct Options {
    absl::Duration poll_wait = absl::Seconds(10);   // how long one long poll may wait
    absl::Duration retry_delay = absl::Seconds(1);  // after a failed poll
  };
  NodeDeathWatcher(Options options, PollAsync poll, ListNodes list_nodes, OnDead on_dead);

  // Follows the NODE channel until Stop(). The first poll only takes the channel's position:
  // nodes that died before have nothing of this process's in flight.
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends Run() promptly (cancels the poll in flight). Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // The steps of Run(), public for tests. The next poll to send.
  rpc::PollRequest NextPoll() const ABSL_LOCKS_EXCLUDED(mu_);
  // Applies a reply: reports the nodes that died (each once) and moves the cursor. Returns true
  // when messages were lost (the caller then passes the whole node table to Resync).
  bool OnPollReply(const rpc::PollReply& reply) ABSL_LOCKS_EXCLUDED(mu_);
  void Resync(const std::vector<rpc::NodeInfo>& nodes) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Reports `node` if it is dead and was not reported yet.
  void ReportIfDead(const rpc::NodeInfo& node) ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  PollAsync poll_;
  ListNodes list_nodes_;
  OnDead on_dead_;
  absl::Notification stop_;

  mutable absl::Mutex mu_;
  int64_t cursor_ ABSL_GUARDED_BY(mu_) = -1;
  absl::flat_hash_set<std::string> reported_ ABSL_GUARDED_BY(mu_);  // binary node IDs
  std::function<void()> cancel_ ABSL_GUARDED_BY(mu_);               // of the poll in flight
};

}  // namespace troupe
