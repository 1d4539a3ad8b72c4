#include "src/http/train_runs_view.h"

#include <algorithm>

#include "src/schema/kv_schema.h"

namespace troupe::http {

using nlohmann::json;

json TrainRunsJson(const std::vector<std::string>& records) {
  std::vector<json> runs;
  for (const auto& text : records) {
    json run = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!run.is_object() || !run.contains("run_id") || !run["run_id"].is_string()) continue;
    runs.push_back(std::move(run));
  }
  auto start = [](const json& run) {
    auto it = run.find("start_time_ms");
    return it != run.end() && it->is_number() ? it->get<int64_t>() : int64_t{0};
  };
  std::stable_sort(runs.begin(), runs.end(),
                   [&](const json& a, const json& b) { return start(a) > start(b); });
  if (runs.size() > kMaxTrainRuns) runs.resize(kMaxTrainRuns);
  return json(runs);
}

jobs::Reply TrainRuns(GcsClient& gcs) {
  auto keys = gcs.KVKeys(kTrainRunsNamespace, kTrainRunKeyPrefix);
  if (!keys.ok()) return jobs::Error(503, std::string(keys.status().message()));
  std::vector<std::string> records;
  for (const auto& key : *keys) {
    auto value = gcs.KVGet(kTrainRunsNamespace, key);
    if (!value.ok()) return jobs::Error(503, std::string(value.status().message()));
    if (value->has_value()) records.push_back(**value);
  }
  return {200, TrainRunsJson(records)};
}

}  // namespace troupe::http
