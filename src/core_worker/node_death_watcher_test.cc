#include "src/core_worker/node_death_watcher.h"

#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace troupe {
namespace {

rpc::NodeInfo Node(const NodeId& id, rpc::NodeInfo::State state, int port) {
  rpc::NodeInfo node;
  node.set_node_id(id.Binary());
  node.set_node_ip("10.0.0.1");
  node.set_raylet_port(port);
  node.set_state(state);
  return node;
}

rpc::PubMessage NodeMessage(const rpc::NodeInfo& node) {
  rpc::PubMessage message;
  message.set_channel(rpc::NODE_CHANNEL);
  message.set_key(node.node_id());
  *message.mutable_node() = node;
  return message;
}

class NodeDeathWatcherTest : public ::testing::Test {
 protected:
  NodeDeathWatcherTest()
      : watcher_(
            NodeDeathWatcher::Options{absl::Seconds(10), absl::Milliseconds(1)},
            [this](const rpc::PollRequest& request, NodeDeathWatcher::PollDone done) {
              absl::MutexLock lock(&mu_);
              requests_.push_back(request);
              if (replies_.empty()) {
                // Nothing scripted: park it until cancelled.
                parked_ = std::move(done);
                return std::function<void()>([this] {
                  NodeDeathWatcher::PollDone parked;
                  {
                    absl::MutexLock lock(&mu_);
                    parked = std::move(parked_);
                  }
                  if (parked) parked(absl::CancelledError("cancelled"));
                });
              }
              auto reply = std::move(replies_.front());
              replies_.pop_front();
              done(std::move(reply));
              return std::function<void()>([] {});
            },
            [this]() -> absl::StatusOr<std::vector<rpc::NodeInfo>> { return table_; },
            [this](const NodeId& id, const std::string& raylet) {
              absl::MutexLock lock(&mu_);
              dead_.emplace_back(id, raylet);
            }) {}

  absl::Mutex mu_;
  std::deque<absl::StatusOr<rpc::PollReply>> replies_;
  std::vector<rpc::PollRequest> requests_;
  NodeDeathWatcher::PollDone parked_;
  std::vector<rpc::NodeInfo> table_;
  std::vector<std::pair<NodeId, std::string>> dead_;
  NodeDeathWatcher watcher_;
};

TEST_F(NodeDeathWatcherTest, ReportsEachDeadNodeOnceWithItsRayletAddress) {
  const NodeId a = NodeId::FromRandom(), b = NodeId::FromRandom();
  rpc::PollReply reply;
  reply.set_last_seq(7);
  *reply.add_messages() = NodeMessage(Node(a, rpc::NodeInfo::ALIVE, 1));
  *reply.add_messages() = NodeMessage(Node(b, rpc::NodeInfo::DEAD, 2));
  *reply.add_messages() = NodeMessage(Node(b, rpc::NodeInfo::DEAD, 2));  // published twice
  EXPECT_FALSE(watcher_.OnPollReply(reply));
  ASSERT_EQ(dead_.size(), 1u);
  EXPECT_EQ(dead_[0].first, b);
  EXPECT_EQ(dead_[0].second, "10.0.0.1:2");
  EXPECT_EQ(watcher_.NextPoll().after_seq(), 7);
  EXPECT_EQ(watcher_.NextPoll().channels(0), rpc::NODE_CHANNEL);
  watcher_.Resync({Node(a, rpc::NodeInfo::DEAD, 1), Node(b, rpc::NodeInfo::DEAD, 2)});
  ASSERT_EQ(dead_.size(), 2u);
  EXPECT_EQ(dead_[1].first, a);
}

TEST_F(NodeDeathWatcherTest, RunTakesThePositionFirstThenReadsTheTableWhenMessagesWereLost) {
  const NodeId a = NodeId::FromRandom();
  rpc::PollReply position;
  position.set_last_seq(100);
  position.set_messages_lost(true);  // ignored on the first poll: nothing is in flight yet
  rpc::PollReply lost;
  lost.set_last_seq(200);
  lost.set_messages_lost(true);
  table_ = {Node(a, rpc::NodeInfo::DEAD, 5)};
  {
    absl::MutexLock lock(&mu_);
    replies_.push_back(position);
    replies_.push_back(absl::UnavailableError("GCS restarting"));  // retried after the delay
    replies_.push_back(lost);
  }
  std::thread runner([this] { watcher_.Run(); });
  {
    absl::MutexLock lock(&mu_);
    auto parked = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return parked_ != nullptr; };
    mu_.Await(absl::Condition(&parked));  // the fourth poll waits for news
    ASSERT_EQ(requests_.size(), 4u);
    EXPECT_EQ(requests_[0].after_seq(), -1);
    EXPECT_EQ(requests_[0].timeout_ms(), 0);
    EXPECT_EQ(requests_[1].after_seq(), 100);
    EXPECT_EQ(requests_[1].timeout_ms(), 10000);
    EXPECT_EQ(requests_[3].after_seq(), 200);
    ASSERT_EQ(dead_.size(), 1u);
    EXPECT_EQ(dead_[0].first, a);
  }
  watcher_.Stop();  // cancels the parked poll; Run returns
  runner.join();
}

}  // namespace
}  // namespace troupe
