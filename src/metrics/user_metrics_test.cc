// The user metric rules, a process's batch (MetricsRecorder) and a node's sums
// (MetricsAggregator), without processes: what Prometheus would read after pushes.
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/metrics/metrics_aggregator.h"
#include "src/metrics/metrics_recorder.h"

namespace troupe::metrics {
namespace {

rpc::UserMetricDefinition Define(rpc::UserMetricDefinition::Kind kind, const std::string& name,
                                 std::vector<std::string> tag_keys = {},
                                 std::vector<double> boundaries = {}) {
  rpc::UserMetricDefinition d;
  d.set_kind(kind);
  d.set_name(name);
  d.set_description("what it counts");
  d.set_unit("requests");
  for (auto& key : tag_keys) d.add_tag_keys(key);
  for (double b : boundaries) d.add_boundaries(b);
  return d;
}

const auto kCounter = rpc::UserMetricDefinition::COUNTER;
const auto kGauge = rpc::UserMetricDefinition::GAUGE;
const auto kHistogram = rpc::UserMetricDefinition::HISTOGRAM;

void ExpectInvalid(const absl::Status& status, const std::string& says) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), says)) << status;
}

TEST(UserMetricTest, BadDefinitionsSayWhatIsWrong) {
  ExpectInvalid(ValidateDefinition(Define(kCounter, "")), "a metric name is");
  ExpectInvalid(ValidateDefinition(Define(kCounter, "9lives")), "not starting with a digit");
  ExpectInvalid(ValidateDefinition(Define(kCounter, "has space")), "[a-zA-Z0-9_:]");
  ExpectInvalid(ValidateDefinition(Define(kCounter, "troupe_tasks")), "reserved");
  ExpectInvalid(ValidateDefinition(Define(kCounter, "ok", {"bad-key"})), "tag key \"bad-key\"");
  ExpectInvalid(ValidateDefinition(Define(kCounter, "ok", {"a", "a"})), "given twice");
  ExpectInvalid(ValidateDefinition(Define(kHistogram, "ok", {"le"}, {1})), "\"le\"");
  ExpectInvalid(ValidateDefinition(Define(kHistogram, "ok")), "at least one bucket boundary");
  ExpectInvalid(ValidateDefinition(Define(kHistogram, "ok", {}, {1, 1})), "strictly increasing");
  ExpectInvalid(ValidateDefinition(Define(kGauge, "ok", {}, {1})), "only a histogram");
  EXPECT_OK(ValidateDefinition(Define(kHistogram, "latency_s", {"route"}, {0.1, 1})));
  EXPECT_OK(ValidateDefinition(Define(kCounter, "ns:requests_total", {"_a", "b2"})));
}

TEST(MetricsRecorderTest, BadRecordsAreRefusedAndRecordNothing) {
  MetricsRecorder recorder;
  const auto counter = Define(kCounter, "served_total", {"route"});
  ExpectInvalid(recorder.Record(counter, 1, {}), "missing tag \"route\"");
  ExpectInvalid(recorder.Record(counter, 1, {{"route", "/"}, {"code", "200"}}),
                "unknown tag key \"code\"");
  ExpectInvalid(recorder.Record(counter, -1, {{"route", "/"}}), "only goes up");
  ExpectInvalid(recorder.Record(counter, std::nan(""), {{"route", "/"}}), "finite");
  ExpectInvalid(recorder.Record(Define(kGauge, "bad name"), 1, {}), "invalid metric");
  // A refused first record did not claim the name: a corrected definition records.
  ExpectInvalid(recorder.Record(Define(kGauge, "typo_gauge", {"a"}), 1, {{"b", "x"}}), "unknown");
  EXPECT_OK(recorder.Record(Define(kGauge, "typo_gauge", {"b"}), 1, {{"b", "x"}}));
  EXPECT_OK(recorder.Record(counter, 1, {{"route", "/"}}));
  // Another definition under the same name, in the same process.
  ExpectInvalid(recorder.Record(Define(kGauge, "served_total", {"route"}), 1, {{"route", "/"}}),
                "defined twice");
  rpc::ReportUserMetricsRequest batch = recorder.TakeBatch();
  ASSERT_EQ(batch.points_size(), 2);
  EXPECT_EQ(batch.points(0).name(), "served_total");
  EXPECT_EQ(batch.points(0).value(), 1);
  EXPECT_EQ(recorder.TakeBatch().points_size(), 0);  // taken: the recorder starts over
}

TEST(MetricsRecorderTest, BatchesHoldIncrementsLastValuesAndBuckets) {
  MetricsRecorder recorder;
  const auto counter = Define(kCounter, "served_total", {"route"});
  const auto gauge = Define(kGauge, "queue_depth");
  const auto histogram = Define(kHistogram, "latency_s", {}, {0.1, 1});
  for (int i = 0; i < 3; ++i) ASSERT_OK(recorder.Record(counter, 2, {{"route", "/a"}}));
  ASSERT_OK(recorder.Record(counter, 1, {{"route", "/b"}}));
  ASSERT_OK(recorder.Record(gauge, 7, {}));
  ASSERT_OK(recorder.Record(gauge, 5, {}));
  for (double v : {0.05, 0.1, 0.5, 3.0}) ASSERT_OK(recorder.Record(histogram, v, {}));
  rpc::ReportUserMetricsRequest batch = recorder.TakeBatch();
  EXPECT_EQ(batch.definitions_size(), 3);
  ASSERT_EQ(batch.points_size(), 4);  // by name, then tags
  EXPECT_EQ(batch.points(0).name(), "latency_s");
  EXPECT_EQ(std::vector<uint64_t>(batch.points(0).bucket_counts().begin(),
                                  batch.points(0).bucket_counts().end()),
            (std::vector<uint64_t>{2, 1, 1}));  // 0.1 is in the (.., 0.1] bucket
  EXPECT_EQ(batch.points(0).count(), 4u);
  EXPECT_DOUBLE_EQ(batch.points(0).sum(), 3.65);
  EXPECT_EQ(batch.points(1).name(), "queue_depth");
  EXPECT_EQ(batch.points(1).value(), 5);
  EXPECT_EQ(batch.points(2).tags().at("route"), "/a");
  EXPECT_EQ(batch.points(2).value(), 6);
  EXPECT_EQ(batch.points(3).value(), 1);

  // A batch that could not be sent comes back under what was recorded since.
  ASSERT_OK(recorder.Record(gauge, 9, {}));
  ASSERT_OK(recorder.Record(counter, 1, {{"route", "/a"}}));
  recorder.Restore(batch);
  rpc::ReportUserMetricsRequest again = recorder.TakeBatch();
  ASSERT_EQ(again.points_size(), 4);
  EXPECT_EQ(again.points(0).count(), 4u);
  EXPECT_EQ(again.points(1).value(), 9);  // the newer gauge value wins
  EXPECT_EQ(again.points(2).value(), 7);  // 6 + 1
}

TEST(MetricsAggregatorTest, SumsProcessesAndRendersPrometheusText) {
  const auto counter = Define(kCounter, "served_total", {"route"});
  const auto gauge = Define(kGauge, "queue_depth");
  const auto histogram = Define(kHistogram, "latency_s", {}, {0.1, 1});
  MetricsRecorder a, b;
  ASSERT_OK(a.Record(counter, 2, {{"route", "say \"hi\"\n"}}));
  ASSERT_OK(b.Record(counter, 3, {{"route", "say \"hi\"\n"}}));
  ASSERT_OK(a.Record(gauge, 4, {}));
  ASSERT_OK(b.Record(histogram, 0.5, {}));
  ASSERT_OK(b.Record(histogram, 0.05, {}));
  MetricsAggregator node;
  ASSERT_OK(node.Apply(a.TakeBatch()));
  ASSERT_OK(node.Apply(b.TakeBatch()));
  ASSERT_OK(a.Record(counter, 1, {{"route", "say \"hi\"\n"}}));
  ASSERT_OK(node.Apply(a.TakeBatch()));  // a later push adds to the sum
  EXPECT_EQ(node.RenderPrometheus(),
            "# HELP latency_s what it counts (unit: requests)\n"
            "# TYPE latency_s histogram\n"
            "latency_s_bucket{le=\"0.1\"} 1\n"
            "latency_s_bucket{le=\"1\"} 2\n"
            "latency_s_bucket{le=\"+Inf\"} 2\n"
            "latency_s_sum 0.55\n"
            "latency_s_count 2\n"
            "# HELP queue_depth what it counts (unit: requests)\n"
            "# TYPE queue_depth gauge\n"
            "queue_depth 4\n"
            "# HELP served_total what it counts (unit: requests)\n"
            "# TYPE served_total counter\n"
            "served_total{route=\"say \\\"hi\\\"\\n\"} 6\n");
}

TEST(MetricsAggregatorTest, ConflictingAndMalformedPushesAreSkippedNotApplied) {
  MetricsAggregator node;
  MetricsRecorder a, b;
  ASSERT_OK(a.Record(Define(kCounter, "jobs_total"), 1, {}));
  ASSERT_OK(node.Apply(a.TakeBatch()));
  // Another program uses the name for a gauge, and sends a good metric in the same batch.
  ASSERT_OK(b.Record(Define(kGauge, "jobs_total"), 42, {}));
  ASSERT_OK(b.Record(Define(kGauge, "other"), 1, {}));
  ExpectInvalid(node.Apply(b.TakeBatch()), "already defined on this node");
  // A hand-made batch: a point without a definition, bucket counts that do not fit.
  rpc::ReportUserMetricsRequest bad;
  *bad.add_definitions() = Define(kHistogram, "h", {}, {1});
  auto* point = bad.add_points();
  point->set_name("h");
  point->add_bucket_counts(1);  // needs 2
  bad.add_points()->set_name("undefined");
  ExpectInvalid(node.Apply(bad), "1 bucket counts");
  const std::string text = node.RenderPrometheus();
  EXPECT_TRUE(absl::StrContains(text, "jobs_total 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "other 1\n")) << text;
  EXPECT_FALSE(absl::StrContains(text, "42")) << text;
  EXPECT_FALSE(absl::StrContains(text, "# TYPE h ")) << text;
}

TEST(MetricsAggregatorTest, SeriesPastTheCapAreDroppedAndCounted) {
  MetricsAggregator node(/*max_series=*/2);
  MetricsRecorder a;
  const auto counter = Define(kCounter, "per_user_total", {"user"});
  for (const char* user : {"a", "b", "c"}) ASSERT_OK(a.Record(counter, 1, {{"user", user}}));
  ASSERT_OK(node.Apply(a.TakeBatch()));
  EXPECT_EQ(node.dropped_points(), 1u);
  EXPECT_EQ(node.Snapshot().size(), 2u);
}

TEST(MetricsAggregatorTest, ValuesReadBackExactly) {
  EXPECT_EQ(FormatPrometheusValue(3), "3");
  EXPECT_EQ(FormatPrometheusValue(-2), "-2");
  EXPECT_EQ(FormatPrometheusValue(0.1), "0.1");
  EXPECT_EQ(FormatPrometheusValue(1e20), "1e+20");
  EXPECT_EQ(FormatPrometheusValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(FormatPrometheusValue(INFINITY), "+Inf");
}

}  // namespace
}  // namespace troupe::metrics
