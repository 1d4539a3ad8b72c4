#include "src/gcs/publisher.h"

#include <optional>

#include "gtest/gtest.h"

namespace troupe {
namespace {

rpc::PubMessage NodeMessage(const std::string& key) {
  rpc::PubMessage message;
  message.set_channel(rpc::NODE_CHANNEL);
  message.set_key(key);
  return message;
}

rpc::PubMessage JobMessage(const std::string& key) {
  rpc::PubMessage message;
  message.set_channel(rpc::JOB_CHANNEL);
  message.set_key(key);
  return message;
}

rpc::PollRequest PollFrom(int64_t after_seq, int64_t timeout_ms,
                          std::vector<rpc::Channel> channels = {}) {
  rpc::PollRequest request;
  request.set_after_seq(after_seq);
  request.set_timeout_ms(timeout_ms);
  for (auto c : channels) request.add_channels(c);
  return request;
}

class PublisherTest : public ::testing::Test {
 protected:
  std::optional<rpc::PollReply> reply_;
  Publisher::PollCallback Capture() {
    return [this](rpc::PollReply reply) { reply_ = std::move(reply); };
  }
  FakeClock clock_;
  Publisher publisher_{&clock_, /*max_buffered=*/4};
};

TEST_F(PublisherTest, CursorThenNewMessages) {
  publisher_.Publish(NodeMessage("old"));
  publisher_.Poll(PollFrom(-1, 0), Capture());
  ASSERT_TRUE(reply_);
  EXPECT_EQ(reply_->last_seq(), 1);
  EXPECT_EQ(reply_->messages_size(), 0);

  publisher_.Publish(NodeMessage("a"));
  publisher_.Poll(PollFrom(1, 1000), Capture());
  ASSERT_EQ(reply_->messages_size(), 1);
  EXPECT_EQ(reply_->messages(0).key(), "a");
  EXPECT_EQ(reply_->messages(0).seq(), 2);
  EXPECT_EQ(reply_->last_seq(), 2);
}

TEST_F(PublisherTest, WaitingPollIsAnsweredByTheNextPublish) {
  publisher_.Poll(PollFrom(0, 10000, {rpc::NODE_CHANNEL}), Capture());
  EXPECT_FALSE(reply_);
  EXPECT_EQ(publisher_.num_waiting_polls(), 1u);
  publisher_.Publish(JobMessage("job"));  // not on the requested channel
  EXPECT_FALSE(reply_);
  publisher_.Publish(NodeMessage("node"));
  ASSERT_TRUE(reply_);
  ASSERT_EQ(reply_->messages_size(), 1);
  EXPECT_EQ(reply_->messages(0).key(), "node");
  EXPECT_EQ(reply_->last_seq(), 2);
  EXPECT_EQ(publisher_.num_waiting_polls(), 0u);
}

TEST_F(PublisherTest, WaitingPollExpiresEmpty) {
  publisher_.Poll(PollFrom(0, 500), Capture());
  clock_.Advance(absl::Milliseconds(499));
  publisher_.ExpirePolls();
  EXPECT_FALSE(reply_);
  clock_.Advance(absl::Milliseconds(1));
  publisher_.ExpirePolls();
  ASSERT_TRUE(reply_);
  EXPECT_EQ(reply_->messages_size(), 0);
  EXPECT_FALSE(reply_->messages_lost());
}

TEST_F(PublisherTest, FallingBehindTheBufferReportsLoss) {
  for (int i = 0; i < 6; ++i) publisher_.Publish(NodeMessage(std::to_string(i)));
  publisher_.Poll(PollFrom(1, 0), Capture());  // seq 2 was dropped (buffer keeps 3..6)
  ASSERT_TRUE(reply_);
  EXPECT_TRUE(reply_->messages_lost());
  EXPECT_EQ(reply_->last_seq(), 6);
  publisher_.Poll(PollFrom(2, 0), Capture());  // 3..6 still buffered
  EXPECT_FALSE(reply_->messages_lost());
  EXPECT_EQ(reply_->messages_size(), 4);
}

// Regression: a parked poll rescanned everything published since it parked at every publish
// (quadratic under a burst on other channels), and once the burst outgrew the buffer it was told
// messages_lost, sending the subscriber to re-read the tables for nothing.
TEST_F(PublisherTest, AParkedPollSkipsABurstOnOtherChannelsWithoutLoss) {
  publisher_.Poll(PollFrom(0, 10000, {rpc::NODE_CHANNEL}), Capture());
  for (int i = 0; i < 10; ++i) publisher_.Publish(JobMessage(std::to_string(i)));  // buffer: 4
  EXPECT_FALSE(reply_);
  publisher_.Publish(NodeMessage("node"));
  ASSERT_TRUE(reply_);
  EXPECT_FALSE(reply_->messages_lost());
  ASSERT_EQ(reply_->messages_size(), 1);
  EXPECT_EQ(reply_->messages(0).key(), "node");
  EXPECT_EQ(reply_->messages(0).seq(), 11);
  EXPECT_EQ(reply_->last_seq(), 11);
}

TEST_F(PublisherTest, CursorFromARestartedGcsReportsLoss) {
  publisher_.Poll(PollFrom(100, 1000), Capture());
  ASSERT_TRUE(reply_);
  EXPECT_TRUE(reply_->messages_lost());
  EXPECT_EQ(reply_->last_seq(), 0);
}

TEST_F(PublisherTest, OldCursorIsLostEvenAfterTheNewGcsPublishedMore) {
  // The first incarnation numbers from its clock base; a subscriber follows it.
  Publisher old_gcs(&clock_, 100, absl::Seconds(60), Publisher::SeqBaseFromClock(clock_));
  for (int i = 0; i < 3; ++i) old_gcs.Publish(NodeMessage("old"));
  const int64_t cursor = old_gcs.last_seq();
  // The GCS is killed and restarted a second later; the new one publishes more than the old did
  // before the subscriber's next poll (with seqs from 1 the old cursor would point into them).
  clock_.Advance(absl::Seconds(1));
  Publisher new_gcs(&clock_, 100, absl::Seconds(60), Publisher::SeqBaseFromClock(clock_));
  EXPECT_GT(new_gcs.last_seq(), cursor);
  new_gcs.Poll(PollFrom(cursor, 1000), Capture());  // nothing published yet: lost at once
  ASSERT_TRUE(reply_);
  EXPECT_TRUE(reply_->messages_lost());
  reply_.reset();
  for (int i = 0; i < 10; ++i) new_gcs.Publish(JobMessage("new"));
  new_gcs.Poll(PollFrom(cursor, 1000), Capture());
  ASSERT_TRUE(reply_);
  EXPECT_TRUE(reply_->messages_lost());
  EXPECT_EQ(reply_->last_seq(), new_gcs.last_seq());
  // From the new cursor on, nothing is lost.
  const int64_t resynced = reply_->last_seq();
  new_gcs.Publish(JobMessage("after"));
  new_gcs.Poll(PollFrom(resynced, 0), Capture());
  EXPECT_FALSE(reply_->messages_lost());
  ASSERT_EQ(reply_->messages_size(), 1);
  EXPECT_EQ(reply_->messages(0).key(), "after");
}

}  // namespace
}  // namespace troupe
