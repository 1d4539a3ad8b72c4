#include "src/raylet/simulated_node_reporter.h"

#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(ReadReportReplyTest, ReadsTheVersionAndCountsTheEntriesOfARealReply) {
  rpc::ReportResourceUsageReply reply;
  for (int i = 0; i < 3; ++i) {
    rpc::ResourceUsage* entry = reply.add_cluster();
    entry->set_node_id(std::string(16, static_cast<char>('a' + i)));
    (*entry->mutable_total())["sim"] = 8;
    (*entry->mutable_available())["sim"] = i;
    entry->set_raylet_address("127.0.0.1:1234");
  }
  reply.set_view_version(1'700'000'000'000'042);
  reply.set_full_view(true);
  reply.add_removed_node_ids(std::string(16, 'z'));
  auto answer = ReadReportReply(reply.SerializeAsString());
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->view_version, 1'700'000'000'000'042);
  EXPECT_EQ(answer->entries, 3);
}

TEST(ReadReportReplyTest, AnEmptyDeltaHasNoEntries) {
  rpc::ReportResourceUsageReply reply;
  reply.set_view_version(7);
  auto answer = ReadReportReply(reply.SerializeAsString());
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->view_version, 7);
  EXPECT_EQ(answer->entries, 0);
}

TEST(ReadReportReplyTest, CutBytesAreAnError) {
  rpc::ReportResourceUsageReply reply;
  (*reply.add_cluster()->mutable_available())["sim"] = 1;
  reply.set_view_version(9);
  const std::string wire = reply.SerializeAsString();
  auto answer = ReadReportReply(wire.substr(0, 3));
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace troupe
