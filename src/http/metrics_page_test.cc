#include "src/http/metrics_page.h"

#include <string>

#include "gtest/gtest.h"
#include "proto/schema.pb.h"
#include "src/http/http_metrics.h"
#include "src/http/state_views.h"

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

// Regression: every unknown path became a series of its own (120k requests: 159 MB of /metrics),
// and a '"' or '\\' in a path broke the format. Requests that matched no route share one label.
TEST(HttpMetricsTest, UnknownPathsShareOneLabelAndLabelsAreEscaped) {
  HttpMetrics metrics;
  for (int i = 0; i < 1000; ++i) metrics.Observe("", 401, 0.001);
  metrics.Observe("GET /api/jobs/{id}", 200, 0.002);
  std::string out;
  metrics.Render(&out);
  EXPECT_TRUE(Contains(out, "troupe_http_requests_total{route=\"other\",code=\"401\"} 1000"))
      << out;
  EXPECT_TRUE(
      Contains(out, "troupe_http_requests_total{route=\"GET /api/jobs/{id}\",code=\"200\"} 1"))
      << out;
  size_t series = 0;
  for (size_t at = out.find("_count{"); at != std::string::npos; at = out.find("_count{", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, 2u) << "one latency series per route, not per path:\n" << out;

  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  HttpMetrics odd;
  odd.Observe("GET /x\"y\\z\n", 200, 0.1);
  std::string text;
  odd.Render(&text);
  EXPECT_TRUE(
      Contains(text, "troupe_http_requests_total{route=\"GET /x\\\"y\\\\z\\n\",code=\"200\"} 1"))
      << text;
}

// Prometheus' http_sd_configs read every alive node that serves /metrics, with its labels.
TEST(PrometheusTargetsTest, ListsAliveNodesThatServeMetrics) {
  std::vector<rpc::NodeInfo> nodes(4);
  nodes[0].set_node_id(std::string(28, '\x01'));
  nodes[0].set_node_ip("10.0.0.1");
  nodes[0].set_metrics_port(9100);
  nodes[0].set_is_head(true);
  nodes[1].set_node_id(std::string(28, '\x02'));
  nodes[1].set_node_ip("10.0.0.2");
  nodes[1].set_metrics_port(9200);
  nodes[1].set_metrics_tls(true);
  nodes[2] = nodes[1];
  nodes[2].set_state(rpc::NodeInfo::DEAD);  // dead: not scraped
  nodes[3].set_node_ip("10.0.0.4");         // serves no metrics
  const nlohmann::json targets = PrometheusTargets(nodes);
  ASSERT_EQ(targets.size(), 2u) << targets.dump();
  EXPECT_EQ(targets[0]["targets"], nlohmann::json::array({"10.0.0.1:9100"}));
  std::string head_hex;
  for (int i = 0; i < 28; ++i) head_hex += "01";
  EXPECT_EQ(targets[0]["labels"]["node_id"], head_hex) << targets.dump();
  EXPECT_EQ(targets[0]["labels"]["is_head"], "true");
  EXPECT_FALSE(targets[0]["labels"].contains("__scheme__"));
  EXPECT_EQ(targets[1]["targets"], nlohmann::json::array({"10.0.0.2:9200"}));
  EXPECT_EQ(targets[1]["labels"]["__scheme__"], "https");
  EXPECT_EQ(targets[1]["labels"]["node_ip"], "10.0.0.2");
}

}  // namespace
}  // namespace troupe::http
