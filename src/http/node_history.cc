#include "src/http/node_history.h"

#include "src/common/ids.h"

namespace troupe::http {

bool NodeHistory::Due(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  return now - last_ >= interval_;
}

void NodeHistory::Record(absl::Time now, const std::vector<rpc::ResourceUsage>& usage) {
  absl::MutexLock lock(&mu_);
  last_ = now;
  const int64_t t_ms = absl::ToUnixMillis(now);
  for (const auto& u : usage) {
    nodes_[BytesToHex(u.node_id())].push_back({t_ms, u.cpu_percent(), u.memory_used_bytes(),
                                               u.memory_total_bytes(),
                                               u.object_store_used_bytes()});
  }
  const int64_t oldest = absl::ToUnixMillis(now - window_);
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    auto& samples = it->second;
    while (!samples.empty() && samples.front().t_ms < oldest) samples.pop_front();
    it = samples.empty() ? nodes_.erase(it) : std::next(it);
  }
}

nlohmann::json NodeHistory::ToJson() const {
  absl::MutexLock lock(&mu_);
  nlohmann::json nodes = nlohmann::json::object();
  for (const auto& [node, samples] : nodes_) {
    nlohmann::json rows = nlohmann::json::array();
    for (const Sample& s : samples) {
      rows.push_back({{"t", s.t_ms},
                      {"cpu_percent", s.cpu_percent},
                      {"memory_used_bytes", s.memory_used},
                      {"memory_total_bytes", s.memory_total},
                      {"object_store_used_bytes", s.store_used}});
    }
    nodes[node] = rows;
  }
  return {{"interval_s", absl::ToInt64Seconds(interval_)},
          {"window_s", absl::ToInt64Seconds(window_)},
          {"nodes", nodes}};
}

}  // namespace troupe::http
