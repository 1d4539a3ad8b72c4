#include "src/metrics/metrics_aggregator.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troupe::metrics {
namespace {

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `{k="v",...}` with `extra` (e.g. le="0.5") last; "" when there is no label at all.
std::string Labels(const Tags& tags, const std::string& extra = "") {
  std::vector<std::string> parts;
  for (const auto& [key, value] : tags) {
    parts.push_back(absl::StrCat(key, "=\"", EscapeLabelValue(value), "\""));
  }
  if (!extra.empty()) parts.push_back(extra);
  return parts.empty() ? "" : absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

}  // namespace

std::string FormatPrometheusValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buffer[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

absl::Status MetricsAggregator::Apply(const rpc::ReportUserMetricsRequest& batch) {
  std::vector<std::string> problems;
  absl::MutexLock lock(&mu_);
  std::map<std::string, const rpc::UserMetricDefinition*> definitions;
  for (const rpc::UserMetricDefinition& definition : batch.definitions()) {
    if (auto status = ValidateDefinition(definition); !status.ok()) {
      problems.push_back(std::string(status.message()));
      continue;
    }
    auto known = metrics_.find(definition.name());
    if (known != metrics_.end() && !SameDefinition(known->second.definition, definition)) {
      problems.push_back(
          absl::StrCat("metric \"", definition.name(), "\" is already defined on this node as ",
                       Describe(known->second.definition), "; skipped ", Describe(definition)));
      continue;
    }
    definitions[definition.name()] = &definition;
  }
  for (const rpc::UserMetricPoint& point : batch.points()) {
    auto definition_it = definitions.find(point.name());
    if (definition_it == definitions.end()) continue;  // reported above (or no definition sent)
    const rpc::UserMetricDefinition& definition = *definition_it->second;
    Tags tags(point.tags().begin(), point.tags().end());
    const bool histogram = definition.kind() == rpc::UserMetricDefinition::HISTOGRAM;
    absl::Status valid = ValidateRecord(
        definition, definition.kind() == rpc::UserMetricDefinition::GAUGE ? point.value() : 0,
        tags);
    if (valid.ok() && histogram && point.bucket_counts_size() != definition.boundaries_size() + 1) {
      valid = absl::InvalidArgumentError(
          absl::StrCat(point.bucket_counts_size(), " bucket counts for ", Describe(definition)));
    }
    if (valid.ok() && definition.kind() == rpc::UserMetricDefinition::COUNTER &&
        !(point.value() >= 0 && std::isfinite(point.value()))) {
      valid = absl::InvalidArgumentError(
          absl::StrCat("counter increment ", point.value(), " for ", Describe(definition)));
    }
    if (!valid.ok()) {
      problems.push_back(std::string(valid.message()));
      continue;
    }
    Metric& metric = metrics_[point.name()];
    if (metric.series.empty()) metric.definition = definition;
    auto series_it = metric.series.find(tags);
    if (series_it == metric.series.end()) {
      if (num_series_ >= max_series_) {
        ++dropped_points_;
        continue;
      }
      series_it = metric.series.emplace(std::move(tags), Series{}).first;
      ++num_series_;
    }
    Series& series = series_it->second;
    switch (definition.kind()) {
      case rpc::UserMetricDefinition::GAUGE:
        series.value = point.value();
        break;
      case rpc::UserMetricDefinition::HISTOGRAM:
        series.buckets.resize(point.bucket_counts_size(), 0);
        for (int i = 0; i < point.bucket_counts_size(); ++i) {
          series.buckets[i] += point.bucket_counts(i);
        }
        series.sum += point.sum();
        series.count += point.count();
        break;
      default:
        series.value += point.value();
    }
  }
  if (metrics_.size() > 0) {
    // A metric whose every point was dropped leaves no empty entry behind.
    for (auto it = metrics_.begin(); it != metrics_.end();) {
      it = it->second.series.empty() ? metrics_.erase(it) : std::next(it);
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("skipped user metrics: ", absl::StrJoin(problems, "; ")));
}

std::string MetricsAggregator::RenderPrometheus() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, metric] : metrics_) {
    const rpc::UserMetricDefinition& d = metric.definition;
    std::string help = d.description();
    if (!d.unit().empty())
      absl::StrAppend(&help, help.empty() ? "" : " ", "(unit: ", d.unit(), ")");
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ", name, " ",
                    KindName(d.kind()), "\n");
    for (const auto& [tags, series] : metric.series) {
      if (d.kind() != rpc::UserMetricDefinition::HISTOGRAM) {
        absl::StrAppend(&out, name, Labels(tags), " ", FormatPrometheusValue(series.value), "\n");
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < series.buckets.size(); ++i) {
        cumulative += series.buckets[i];
        const std::string le = i < static_cast<size_t>(d.boundaries_size())
                                   ? FormatPrometheusValue(d.boundaries(i))
                                   : "+Inf";
        absl::StrAppend(&out, name, "_bucket", Labels(tags, absl::StrCat("le=\"", le, "\"")), " ",
                        cumulative, "\n");
      }
      absl::StrAppend(&out, name, "_sum", Labels(tags), " ", FormatPrometheusValue(series.sum),
                      "\n", name, "_count", Labels(tags), " ", series.count, "\n");
    }
  }
  return out;
}

std::vector<MetricsAggregator::SeriesValue> MetricsAggregator::Snapshot() const {
  std::vector<SeriesValue> values;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, metric] : metrics_) {
    for (const auto& [tags, series] : metric.series) {
      const bool histogram = metric.definition.kind() == rpc::UserMetricDefinition::HISTOGRAM;
      values.push_back({name, metric.definition.kind(), tags, histogram ? series.sum : series.value,
                        series.count});
    }
  }
  return values;
}

uint64_t MetricsAggregator::dropped_points() const {
  absl::MutexLock lock(&mu_);
  return dropped_points_;
}

}  // namespace troupe::metrics
