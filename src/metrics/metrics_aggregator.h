// MetricsAggregator: the user metrics of one node, as its raylet serves them on /metrics. Each
// batch a worker or driver of the node pushes (MetricsRecorder::TakeBatch) is added in: counters
// and histograms sum over the node's processes (and keep what exited processes recorded, so they
// never go down), a gauge holds the value last pushed. Renders the Prometheus text format.
// Owned by the Raylet. Thread-safe: Apply on gRPC threads, Render on the metrics server's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/raylet.pb.h"
#include "src/metrics/user_metric.h"

namespace troupe::metrics {

class MetricsAggregator {
 public:
  // At most this many time series per node; points of new series past it are dropped.
  static constexpr size_t kDefaultMaxSeries = 10000;
  explicit MetricsAggregator(size_t max_series = kDefaultMaxSeries) : max_series_(max_series) {}

  // Adds a pushed batch. Points of a metric whose definition is invalid, missing, or differs
  // from the one this node first saw under that name (two programs using one name differently),
  // and bad points, are skipped; the rest is applied. Returns OK, or InvalidArgument naming what
  // was skipped and why.
  absl::Status Apply(const rpc::ReportUserMetricsRequest& batch) ABSL_LOCKS_EXCLUDED(mu_);

  // The Prometheus text exposition format (version 0.0.4) of every series, metrics by name.
  std::string RenderPrometheus() const ABSL_LOCKS_EXCLUDED(mu_);

  // The latest value of each series (histograms: their count and sum), for the dashboard.
  struct SeriesValue {
    std::string name;
    rpc::UserMetricDefinition::Kind kind;
    Tags tags;
    double value = 0;    // counter, gauge; histogram: the sum
    uint64_t count = 0;  // histogram
  };
  std::vector<SeriesValue> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

  // Points dropped so far because the node had max_series series.
  uint64_t dropped_points() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Series {
    double value = 0;
    std::vector<uint64_t> buckets;  // per bucket, not cumulative
    double sum = 0;
    uint64_t count = 0;
  };
  struct Metric {
    rpc::UserMetricDefinition definition;
    std::map<Tags, Series> series;
  };

  const size_t max_series_;
  mutable absl::Mutex mu_;
  std::map<std::string, Metric> metrics_ ABSL_GUARDED_BY(mu_);
  size_t num_series_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_points_ ABSL_GUARDED_BY(mu_) = 0;
};

// A double as Prometheus reads it: integers exactly, "+Inf", "NaN", else the shortest text that
// reads back the same.
std::string FormatPrometheusValue(double value);

}  // namespace troupe::metrics
