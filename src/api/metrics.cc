// troupe/metrics.h: the metric objects check their definition when built (the rules of
// src/metrics/user_metric.h) and record through the runtime.
#include "troupe/metrics.h"

#include <utility>

#include "src/api/core_worker_runtime.h"
#include "src/metrics/user_metric.h"
#include "troupe/api.h"

namespace troupe::metrics {
namespace {

internal::MetricSpec Spec(internal::MetricSpec::Kind kind, const std::string& name,
                          const std::string& description, const std::string& unit,
                          const std::vector<std::string>& tag_keys,
                          std::vector<double> boundaries = {}) {
  return {kind, name, description, unit, std::move(boundaries), tag_keys};
}

}  // namespace

Metric::Metric(internal::MetricSpec spec) : spec_(std::move(spec)) {
  if (auto status = ValidateDefinition(internal::ToMetricDefinition(spec_)); !status.ok()) {
    throw InvalidArgumentError(std::string(status.message()));
  }
}

void Metric::Record(double value, const Tags& tags) const {
  internal::RequireRuntime().RecordMetric(spec_, value, tags);
}

Counter::Counter(const std::string& name, const std::string& description, const std::string& unit,
                 const std::vector<std::string>& tag_keys)
    : Metric(Spec(internal::MetricSpec::Kind::kCounter, name, description, unit, tag_keys)) {}

Gauge::Gauge(const std::string& name, const std::string& description, const std::string& unit,
             const std::vector<std::string>& tag_keys)
    : Metric(Spec(internal::MetricSpec::Kind::kGauge, name, description, unit, tag_keys)) {}

Histogram::Histogram(const std::string& name, const std::string& description,
                     const std::string& unit, const std::vector<double>& boundaries,
                     const std::vector<std::string>& tag_keys)
    : Metric(Spec(internal::MetricSpec::Kind::kHistogram, name, description, unit, tag_keys,
                  boundaries)) {}

}  // namespace troupe::metrics
