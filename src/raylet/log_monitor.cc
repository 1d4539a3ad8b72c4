#include "src/raylet/log_monitor.h"

#include <fstream>
#include <set>

namespace troupe {
namespace {
constexpr int64_t kMaxReadPerTick = 1 << 20;
constexpr char kTaskMarker[] = ":troupe task ";
}  // namespace

void LogMonitor::Tick() {
  std::set<std::string> alive;
  for (const auto& worker : pool_->Snapshot()) {
    alive.insert(worker->log_path);
    auto& followed = files_[worker->log_path];
    if (!followed.worker) followed.worker = worker;
  }
  rpc::PublishLogsRequest request;
  for (auto it = files_.begin(); it != files_.end();) {
    Followed& followed = it->second;
    if (!alive.count(it->first)) followed.gone = true;
    std::ifstream in(it->first, std::ios::binary);
    in.seekg(followed.offset);
    std::string chunk(kMaxReadPerTick, '\0');
    in.read(chunk.data(), kMaxReadPerTick);
    chunk.resize(static_cast<size_t>(in.gcount()));
    followed.offset += static_cast<int64_t>(chunk.size());
    followed.partial += chunk;
    rpc::LogBatch batch;
    size_t start = 0;
    for (size_t newline; (newline = followed.partial.find('\n', start)) != std::string::npos;
         start = newline + 1) {
      // Task markers (task_executor.cc) are for `troupe logs --task-id`, not for drivers.
      if (followed.partial.compare(start, sizeof(kTaskMarker) - 1, kTaskMarker) == 0) continue;
      batch.add_lines(followed.partial.substr(start, newline - start));
    }
    followed.partial.erase(0, start);
    if (followed.gone && chunk.empty() && !followed.partial.empty()) {
      batch.add_lines(followed.partial);  // the last line had no newline
      followed.partial.clear();
    }
    if (batch.lines_size() > 0) {
      batch.set_job_id(followed.worker->job_id.Binary());
      batch.set_node_id(node_id_.Binary());
      batch.set_pid(followed.worker->pid);
      batch.set_worker_id(followed.worker->worker_id.Binary());
      *request.add_batches() = std::move(batch);
    }
    if (followed.gone && chunk.empty()) {
      files_.erase(it++);
    } else {
      ++it;
    }
  }
  if (request.batches_size() > 0) (void)gcs_->PublishLogs(request);
}

}  // namespace troupe
