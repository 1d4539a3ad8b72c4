// User metrics (troupe/metrics.h: Counter, Gauge, Histogram with tags): the rules both sides
// share. A worker or driver records into a MetricsRecorder (metrics_recorder.h) and pushes the
// changes to its raylet, whose MetricsAggregator (metrics_aggregator.h) adds up the node's
// workers and serves them to Prometheus. Definitions travel as rpc::UserMetricDefinition.
// Stateless functions; any thread.
#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"
#include "proto/raylet.pb.h"

namespace troupe::metrics {

using Tags = std::map<std::string, std::string>;

// "counter", "gauge" or "histogram".
const char* KindName(rpc::UserMetricDefinition::Kind kind);

// OK, or InvalidArgument saying what is wrong and what is allowed: the name (Prometheus'
// [a-zA-Z_:][a-zA-Z0-9_:]*, at most 200 characters, not starting "troupe_" or "__"), the tag keys
// ([a-zA-Z_][a-zA-Z0-9_]*, not "__..." nor, for a histogram, "le"; distinct; at most 20), the
// boundaries (a histogram's: at least one, finite, strictly increasing; none for the others),
// and description and unit (at most 1,000 characters).
absl::Status ValidateDefinition(const rpc::UserMetricDefinition& definition);

// OK, or InvalidArgument for a record of `value` with `tags` on a valid `definition`: every tag
// key given exactly (no unknown key, none missing), values at most 1,000 bytes, a finite value,
// and no negative counter increment.
absl::Status ValidateRecord(const rpc::UserMetricDefinition& definition, double value,
                            const Tags& tags);

// True when the two describe the same metric (kind, description, unit, boundaries, tag keys).
bool SameDefinition(const rpc::UserMetricDefinition& a, const rpc::UserMetricDefinition& b);

// One line describing a definition, for error messages: `counter "x" (tags: a, b)`.
std::string Describe(const rpc::UserMetricDefinition& definition);

}  // namespace troupe::metrics
