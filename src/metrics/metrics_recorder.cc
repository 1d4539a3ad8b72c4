#include "src/metrics/metrics_recorder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace troupe::metrics {

absl::Status MetricsRecorder::Record(const rpc::UserMetricDefinition& definition, double value,
                                     const Tags& tags) {
  absl::MutexLock lock(&mu_);
  auto known = definitions_.find(definition.name());
  if (known == definitions_.end()) {
    if (auto status = ValidateDefinition(definition); !status.ok()) return status;
    // A refused record does not claim the name for its definition.
    if (auto status = ValidateRecord(definition, value, tags); !status.ok()) return status;
    known = definitions_.emplace(definition.name(), definition).first;
  } else if (!SameDefinition(known->second, definition)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric \"", definition.name(), "\" is defined twice in this process, as ",
                     Describe(known->second), " and as ", Describe(definition),
                     ": one name, one definition (give the other metric another name)"));
  } else if (auto status = ValidateRecord(definition, value, tags); !status.ok()) {
    return status;
  }
  Series change;
  if (definition.kind() == rpc::UserMetricDefinition::HISTOGRAM) {
    const auto& bounds = definition.boundaries();
    change.buckets.assign(bounds.size() + 1, 0);
    // Bucket i holds observations in (bounds[i-1], bounds[i]]; the last one past every bound.
    change.buckets[std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin()] = 1;
    change.sum = value;
    change.count = 1;
  } else {
    change.value = value;
  }
  AddLocked(known->second, tags, change, /*newer=*/true);
  return absl::OkStatus();
}

void MetricsRecorder::AddLocked(const rpc::UserMetricDefinition& definition, const Tags& tags,
                                const Series& change, bool newer) {
  auto [it, inserted] = pending_.try_emplace({definition.name(), tags});
  Series& series = it->second;
  switch (definition.kind()) {
    case rpc::UserMetricDefinition::GAUGE:
      if (inserted || newer) series.value = change.value;
      break;
    case rpc::UserMetricDefinition::HISTOGRAM:
      if (series.buckets.size() < change.buckets.size()) {
        series.buckets.resize(change.buckets.size(), 0);
      }
      for (size_t i = 0; i < change.buckets.size(); ++i) series.buckets[i] += change.buckets[i];
      series.sum += change.sum;
      series.count += change.count;
      break;
    default:
      series.value += change.value;
  }
}

rpc::ReportUserMetricsRequest MetricsRecorder::TakeBatch() {
  std::map<std::pair<std::string, Tags>, Series> pending;
  rpc::ReportUserMetricsRequest batch;
  absl::MutexLock lock(&mu_);
  pending.swap(pending_);
  std::string last_name;
  for (auto& [key, series] : pending) {
    const auto& [name, tags] = key;
    if (name != last_name) *batch.add_definitions() = definitions_.at(name);
    last_name = name;
    rpc::UserMetricPoint* point = batch.add_points();
    point->set_name(name);
    for (const auto& [k, v] : tags) (*point->mutable_tags())[k] = v;
    point->set_value(series.value);
    for (uint64_t count : series.buckets) point->add_bucket_counts(count);
    point->set_sum(series.sum);
    point->set_count(series.count);
  }
  return batch;
}

void MetricsRecorder::Restore(const rpc::ReportUserMetricsRequest& batch) {
  absl::MutexLock lock(&mu_);
  for (const rpc::UserMetricPoint& point : batch.points()) {
    auto definition = definitions_.find(point.name());
    if (definition == definitions_.end()) continue;  // not this recorder's batch
    Series change;
    change.value = point.value();
    change.buckets.assign(point.bucket_counts().begin(), point.bucket_counts().end());
    change.sum = point.sum();
    change.count = point.count();
    AddLocked(definition->second, Tags(point.tags().begin(), point.tags().end()), change,
              /*newer=*/false);
  }
}

}  // namespace troupe::metrics
