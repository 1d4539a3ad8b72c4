#include "src/raylet/log_monitor.h"

#include <set>

#include "absl/strings/match.h"

namespace troupe {
namespace {
constexpr char kTaskMarker[] = ":troupe task ";
}  // namespace

void LogMonitor::Tick() {
  std::set<std::string> alive;
  for (const auto& worker : pool_->Snapshot()) {
    alive.insert(worker->log_path);
    auto [it, added] = files_.try_emplace(worker->log_path, worker->log_path);
    if (added) it->second.worker = worker;
  }
  rpc::PublishLogsRequest request;
  for (auto it = files_.begin(); it != files_.end();) {
    Followed& followed = it->second;
    if (!alive.count(it->first)) followed.gone = true;
    std::vector<std::string> lines;
    const int64_t read = followed.tail.ReadLines(followed.gone, &lines);
    rpc::LogBatch batch;
    for (auto& line : lines) {
      // Task markers (task_executor.cc) are for `troupe logs --task-id`, not for drivers.
      if (absl::StartsWith(line, kTaskMarker)) continue;
      batch.add_lines(std::move(line));
    }
    if (batch.lines_size() > 0) {
      batch.set_job_id(followed.worker->job_id.Binary());
      batch.set_node_id(node_id_.Binary());
      batch.set_pid(followed.worker->pid);
      batch.set_worker_id(followed.worker->worker_id.Binary());
      *request.add_batches() = std::move(batch);
    }
    if (followed.gone && read == 0) {
      files_.erase(it++);
    } else {
      ++it;
    }
  }
  if (request.batches_size() > 0) (void)gcs_->PublishLogs(request);
}

}  // namespace troupe
