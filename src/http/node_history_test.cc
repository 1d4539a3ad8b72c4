#include "src/http/node_history.h"

#include "gtest/gtest.h"
#include "src/common/ids.h"

namespace troupe::http {
namespace {

rpc::ResourceUsage Usage(const NodeId& node, double cpu, int64_t store) {
  rpc::ResourceUsage u;
  u.set_node_id(node.Binary());
  u.set_cpu_percent(cpu);
  u.set_memory_used_bytes(100);
  u.set_memory_total_bytes(400);
  u.set_object_store_used_bytes(store);
  return u;
}

TEST(NodeHistoryTest, KeepsOneSamplePerIntervalForTheWindow) {
  NodeHistory history(absl::Minutes(1), absl::Seconds(10));
  const NodeId a = NodeId::FromRandom(), b = NodeId::FromRandom();
  absl::Time now = absl::FromUnixSeconds(1000);
  EXPECT_TRUE(history.Due(now));
  history.Record(now, {Usage(a, 10, 1), Usage(b, 20, 2)});
  EXPECT_FALSE(history.Due(now + absl::Seconds(9)));
  EXPECT_TRUE(history.Due(now + absl::Seconds(10)));
  // Node b stops reporting (it died): its samples age out, then the node goes.
  for (int i = 1; i <= 6; ++i) history.Record(now + absl::Seconds(10 * i), {Usage(a, 30, 3)});
  nlohmann::json json = history.ToJson();
  EXPECT_EQ(json["interval_s"], 10);
  EXPECT_EQ(json["window_s"], 60);
  ASSERT_EQ(json["nodes"][a.Hex()].size(), 7u);
  EXPECT_EQ(json["nodes"][a.Hex()][0]["cpu_percent"], 10.0);
  EXPECT_EQ(json["nodes"][a.Hex()][6]["object_store_used_bytes"], 3);
  EXPECT_EQ(json["nodes"][a.Hex()][6]["memory_total_bytes"], 400);
  EXPECT_EQ(json["nodes"][b.Hex()].size(), 1u);
  history.Record(now + absl::Seconds(70), {Usage(a, 30, 3)});
  json = history.ToJson();
  EXPECT_FALSE(json["nodes"].contains(b.Hex())) << "no samples left in the window";
  EXPECT_EQ(json["nodes"][a.Hex()].size(), 7u) << "the oldest dropped";
  EXPECT_EQ(json["nodes"][a.Hex()][0]["t"], 1010 * 1000);
}

}  // namespace
}  // namespace troupe::http
