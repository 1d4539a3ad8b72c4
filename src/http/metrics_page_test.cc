#include "src/http/metrics_page.h"

#include "gtest/gtest.h"
#include "proto/schema.pb.h"

namespace troupe::http {
namespace {

bool Contains(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(MetricsPageTest, TaskCountersOfAllProcessesAreSummed) {
  rpc::TaskCounters a, b;
  a.set_tasks_submitted(5);
  a.set_tasks_finished(4);
  a.set_tasks_failed(1);
  a.set_tasks_retried(2);
  a.set_tasks_reconstructed(1);
  b.set_tasks_reconstructed(2);
  a.set_actor_calls_submitted(7);
  b.set_tasks_submitted(10);
  b.set_tasks_finished(10);
  b.set_actor_calls_finished(6);
  b.set_actor_calls_failed(1);
  const std::string text = RenderTaskCounters(
      {a.SerializeAsString(), "\xff not a TaskCounters message", b.SerializeAsString()});
  EXPECT_TRUE(Contains(text, "troupe_tasks_total{state=\"submitted\"} 15")) << text;
  EXPECT_TRUE(Contains(text, "troupe_tasks_total{state=\"finished\"} 14"));
  EXPECT_TRUE(Contains(text, "troupe_tasks_total{state=\"failed\"} 1"));
  EXPECT_TRUE(Contains(text, "troupe_tasks_total{state=\"retried\"} 2"));
  EXPECT_TRUE(Contains(text, "troupe_tasks_total{state=\"reconstructed\"} 3"));
  EXPECT_TRUE(Contains(text, "troupe_actor_calls_total{state=\"submitted\"} 7"));
  EXPECT_TRUE(Contains(text, "troupe_actor_calls_total{state=\"finished\"} 6"));
  EXPECT_TRUE(Contains(text, "troupe_actor_calls_total{state=\"failed\"} 1"));
  EXPECT_TRUE(Contains(text, "# TYPE troupe_tasks_total counter"));
}

TEST(MetricsPageTest, NoProcessesReportZeros) {
  const std::string text = RenderTaskCounters({});
  EXPECT_TRUE(Contains(text, "troupe_tasks_total{state=\"submitted\"} 0"));
  EXPECT_TRUE(Contains(text, "troupe_actor_calls_total{state=\"failed\"} 0"));
}

}  // namespace
}  // namespace troupe::http
