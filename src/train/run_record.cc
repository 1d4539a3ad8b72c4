#include "src/train/run_record.h"

#include <cmath>
#include <random>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "src/schema/kv_schema.h"
#include "troupe/errors.h"
#include "troupe/runtime.h"

namespace troupe::train {
namespace {

using nlohmann::json;

json MetricsJson(const Metrics& metrics) {
  json out = json::object();
  for (const auto& [key, value] : metrics) {
    out[key] = std::isfinite(value) ? json(value) : json(nullptr);
  }
  return out;
}

}  // namespace

std::string RunRecordJson(const RunRecord& record) {
  json workers = json::array();
  for (const auto& w : record.workers) {
    workers.push_back({{"rank", w.rank}, {"node_id", w.node_id}, {"gpu", w.gpu}});
  }
  json metrics = json::array();
  const size_t first =
      record.metrics.size() > kMaxRecordedReports ? record.metrics.size() - kMaxRecordedReports : 0;
  for (size_t i = first; i < record.metrics.size(); ++i) {
    metrics.push_back(MetricsJson(record.metrics[i]));
  }
  json checkpoints = json::array();
  for (const auto& c : record.checkpoints) {
    checkpoints.push_back({{"path", c.path}, {"metrics", MetricsJson(c.metrics)}});
  }
  json membership = json::array();
  for (const auto& e : record.membership) {
    membership.push_back({{"generation", e.generation},
                          {"change", e.change},
                          {"why", e.why},
                          {"ranks", e.ranks},
                          {"world_size", e.world_size},
                          {"step", e.step},
                          {"time_ms", e.time_ms},
                          {"recovery_s", e.recovery_s},
                          {"detail", e.detail}});
  }
  json resources = json::object();
  for (const auto& [key, value] : record.resources_per_worker) resources[key] = value;
  return json{{"run_id", record.run_id},
              {"name", record.name},
              {"status", record.status},
              {"error", record.error},
              {"job_id", record.job_id},
              {"start_time_ms", record.start_time_ms},
              {"end_time_ms", record.end_time_ms},
              {"num_workers", record.num_workers},
              {"min_workers", record.min_workers},
              {"max_workers", record.max_workers},
              {"use_gpu", record.use_gpu},
              {"strategy", record.strategy},
              {"resources_per_worker", resources},
              {"storage_path", record.storage_path},
              {"attempt", record.attempt},
              {"restarts", record.restarts},
              {"workers", workers},
              {"metrics", metrics},
              {"checkpoints", checkpoints},
              {"membership", membership}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string NewRunId(const std::string& name, int64_t start_time_ms) {
  std::random_device random;
  return absl::StrFormat("%s-%d-%08x", name, start_time_ms, random());
}

void PublishRunRecord(const RunRecord& record) {
  ::troupe::internal::Runtime* runtime = ::troupe::internal::CurrentRuntime();
  if (runtime == nullptr) return;
  try {
    runtime->KvPut(kTrainRunsNamespace, TrainRunKey(record.run_id), RunRecordJson(record),
                   /*overwrite=*/true);
  } catch (const TroupeError&) {
    // Display only: a GCS hiccup must not fail the training.
  }
}

}  // namespace troupe::train
