#include "src/core_worker/node_death_watcher.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"

namespace troupe {

NodeDeathWatcher::NodeDeathWatcher(Options options, PollAsync poll, ListNodes list_nodes,
                                   OnDead on_dead)
    : options_(options),
      poll_(std::move(poll)),
      list_nodes_(std::move(list_nodes)),
      on_dead_(std::move(on_dead)) {}

rpc::PollRequest NodeDeathWatcher::NextPoll() const {
  rpc::PollRequest request;
  request.add_channels(rpc::NODE_CHANNEL);
  absl::MutexLock lock(&mu_);
  request.set_after_seq(cursor_);
  request.set_timeout_ms(cursor_ < 0 ? 0 : absl::ToInt64Milliseconds(options_.poll_wait));
  return request;
}

bool NodeDeathWatcher::OnPollReply(const rpc::PollReply& reply) {
  {
    absl::MutexLock lock(&mu_);
    cursor_ = reply.last_seq();
  }
  for (const auto& message : reply.messages()) {
    if (message.channel() == rpc::NODE_CHANNEL && message.has_node()) ReportIfDead(message.node());
  }
  return reply.messages_lost();
}

void NodeDeathWatcher::Resync(const std::vector<rpc::NodeInfo>& nodes) {
  for (const auto& node : nodes) ReportIfDead(node);
}

void NodeDeathWatcher::ReportIfDead(const rpc::NodeInfo& node) {
  if (node.state() != rpc::NodeInfo::DEAD) return;
  auto node_id = NodeId::FromBinary(node.node_id());
  if (!node_id.ok()) return;
  {
    absl::MutexLock lock(&mu_);
    if (!reported_.insert(node.node_id()).second) return;
  }
  on_dead_(*node_id, absl::StrCat(node.node_ip(), ":", node.raylet_port()));
}

void NodeDeathWatcher::Run() {
  bool first = true;
  while (!stop_.HasBeenNotified()) {
    // One poll, waited for here; Stop() cancels it.
    struct Result {
      absl::Notification done;
      absl::StatusOr<rpc::PollReply> reply;
    };
    auto result = std::make_shared<Result>();
    std::function<void()> cancel = poll_(NextPoll(), [result](absl::StatusOr<rpc::PollReply> r) {
      result->reply = std::move(r);
      result->done.Notify();
    });
    {
      absl::MutexLock lock(&mu_);
      cancel_ = cancel;
    }
    if (stop_.HasBeenNotified()) cancel();  // Stop() ran before cancel_ was set
    result->done.WaitForNotification();
    {
      absl::MutexLock lock(&mu_);
      cancel_ = nullptr;
    }
    if (stop_.HasBeenNotified()) return;
    if (!result->reply.ok()) {
      stop_.WaitForNotificationWithTimeout(options_.retry_delay);
      continue;
    }
    // The first reply only positions the cursor; a lost-messages reply after it means deaths
    // may have been missed: read the node table.
    if (OnPollReply(*result->reply) && !first) {
      if (auto nodes = list_nodes_(); nodes.ok()) Resync(*nodes);
    }
    first = false;
  }
}

void NodeDeathWatcher::Stop() {
  std::function<void()> cancel;
  {
    absl::MutexLock lock(&mu_);
    if (!stop_.HasBeenNotified()) stop_.Notify();
    cancel = cancel_;
  }
  if (cancel) cancel();
}

}  // namespace troupe
