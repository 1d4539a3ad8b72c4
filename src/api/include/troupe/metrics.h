// User metrics, as Ray's C++ API has them: troupe::metrics::Counter, Gauge and Histogram, each
// with a name, description, unit and tag keys, recorded with a value per tag combination.
//
//   troupe::metrics::Counter served("requests_served_total", "Requests answered", "requests",
//                                   {"route"});
//   served.Inc(1, {{"route", "/predict"}});
//
// Record in a driver (after Init), and in tasks and actor methods. A record adds to this
// process's batch in memory (a map update under a lock, no RPC); the batch goes to the node's
// raylet every second and when the process ends. Each raylet serves the sums over its node's
// processes on its Prometheus endpoint (`troupe start --metrics-port`), and the head lists every
// node's endpoint for Prometheus' HTTP service discovery (docs/api.md, "Metrics").
//
// Errors: a constructor throws InvalidArgumentError for a bad name (Prometheus' rule), tag key
// or histogram boundaries; a record throws InvalidArgumentError for a tag key the metric did not
// declare or a missing one, a value that is not finite or a negative counter increment, or when
// this process already recorded another metric of that name with a different definition; and
// RuntimeError before Init. What was refused is not recorded.
// Thread-safety: metric objects are immutable after construction; record from any thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "troupe/runtime.h"

namespace troupe::metrics {

// A value for every tag key the metric declared: {{"route", "/predict"}, {"code", "200"}}.
using Tags = std::map<std::string, std::string>;

class Metric {
 public:
  virtual ~Metric() = default;
  const std::string& GetName() const { return spec_.name; }
  // What the value means depends on the kind: Counter::Inc, Gauge::Set, Histogram::Observe.
  void Record(double value, const Tags& tags = {}) const;

 protected:
  // Throws InvalidArgumentError for an invalid definition.
  explicit Metric(internal::MetricSpec spec);

 private:
  internal::MetricSpec spec_;
};

// Goes up only: Prometheus' counter. Name it "..._total" by Prometheus' convention.
class Counter : public Metric {
 public:
  Counter(const std::string& name, const std::string& description, const std::string& unit,
          const std::vector<std::string>& tag_keys = {});
  // Adds `value` (>= 0; default 1).
  void Inc(double value = 1, const Tags& tags = {}) const { Record(value, tags); }
  void Inc(const Tags& tags) const { Record(1, tags); }
};

// The last value set: Prometheus' gauge. Across the processes of a node, the value last pushed.
class Gauge : public Metric {
 public:
  Gauge(const std::string& name, const std::string& description, const std::string& unit,
        const std::vector<std::string>& tag_keys = {});
  void Set(double value, const Tags& tags = {}) const { Record(value, tags); }
};

// Counts observations per bucket: Prometheus' histogram. `boundaries` are the buckets' upper
// bounds, strictly increasing (a last +Inf bucket is implied); an observation equal to a bound
// falls in that bound's bucket.
class Histogram : public Metric {
 public:
  Histogram(const std::string& name, const std::string& description, const std::string& unit,
            const std::vector<double>& boundaries, const std::vector<std::string>& tag_keys = {});
  void Observe(double value, const Tags& tags = {}) const { Record(value, tags); }
};

}  // namespace troupe::metrics
