#include "src/train/worker.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "src/common/package.h"
#include "troupe/api.h"
#include "troupe/collective.h"

namespace troupe::train {
namespace {

std::mutex mu;
Context context;
std::optional<std::string> resume_dir;
std::vector<internal::WireReport> queued;  // rank 0's reports not yet polled

std::map<std::string, TrainLoopFn>& Loops() {
  static auto* loops = new std::map<std::string, TrainLoopFn>();
  return *loops;
}

// Checkpoints may hold a whole model: allow far more than a working directory.
constexpr int64_t kMaxCheckpointBytes = kMaxCheckpointPackageBytes;

}  // namespace

namespace internal {

bool RegisterTrainLoop(const char* name, TrainLoopFn loop) {
  Loops()[name] = loop;
  return true;
}

// The registered name of `loop` ("" if it was not registered).
std::string TrainLoopName(TrainLoopFn loop) {
  for (const auto& [name, fn] : Loops()) {
    if (fn == loop) return name;
  }
  return "";
}

TrainWorker* TrainWorker::Create() { return new TrainWorker(); }

std::vector<std::string> TrainWorker::Where() {
  std::string ids;
  for (int id : GetGpuIds()) absl::StrAppend(&ids, ids.empty() ? "" : ",", id);
  const char* node = std::getenv("TROUPE_NODE_ID");
  return {node ? node : "", ids};
}

bool TrainWorker::Run(std::string loop_name, LoopConfig config, std::vector<int64_t> ranks,
                      std::string group, std::string experiment, std::string checkpoint) {
  auto loop = Loops().find(loop_name);
  if (loop == Loops().end()) {
    throw TroupeError("train loop '" + loop_name + "' is not registered in this executable");
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    context = Context{static_cast<int>(ranks.at(0)),
                      static_cast<int>(ranks.at(1)),
                      static_cast<int>(ranks.at(2)),
                      static_cast<int>(ranks.at(3)),
                      static_cast<int>(ranks.at(4)),
                      static_cast<int>(ranks.at(5)),
                      group,
                      HostGroupName(group),
                      experiment,
                      GetGpuIds(),
                      ranks.size() > 6 && ranks[6] == 1 ? "nccl" : "cpu"};
    resume_dir.reset();
    if (!checkpoint.empty()) {
      const std::string dir = absl::StrCat(std::filesystem::temp_directory_path().string(),
                                           "/troupe-resume-", getpid(), "-", group);
      std::error_code error;
      std::filesystem::remove_all(dir, error);
      if (auto status = UnpackDirectory(checkpoint, dir, PackageLimits::Checkpoint());
          !status.ok()) {
        throw TroupeError("cannot unpack the checkpoint to resume from: " +
                          std::string(status.message()));
      }
      resume_dir = dir;
    }
  }
  // Intra-op threads match the CPUs reserved for this worker (as torchrun's OMP_NUM_THREADS),
  // so N workers on N cores do not fight. Libraries read this when they start their pools.
  setenv("OMP_NUM_THREADS", std::to_string(context.cpus).c_str(), 1);
  loop->second(config);
  return true;
}

std::vector<WireReport> TrainWorker::PollReports() {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<WireReport> out;
  out.swap(queued);
  return out;
}

void QueueReport(WireReport report) {
  std::lock_guard<std::mutex> lock(mu);
  queued.push_back(std::move(report));
}

}  // namespace internal

const Context& GetContext() {
  std::lock_guard<std::mutex> lock(mu);
  return context;
}

std::optional<std::string> GetCheckpoint() {
  std::lock_guard<std::mutex> lock(mu);
  return resume_dir;
}

void Report(const Metrics& metrics, const std::string& checkpoint_dir) {
  const Context& ctx = GetContext();
  // Every rank reports: a synchronisation point, so checkpoints are of one consistent step. On
  // the CPU side group: a host-side wait, whatever the main group's backend.
  if (ctx.world_size > 1) collective::Barrier(ctx.host_group);
  if (ctx.world_rank != 0) return;
  std::string package;
  if (!checkpoint_dir.empty()) {
    auto packed = PackDirectory(checkpoint_dir, kMaxCheckpointBytes);
    if (!packed.ok()) {
      throw TroupeError("Report: cannot pack checkpoint directory " + checkpoint_dir + ": " +
                        std::string(packed.status().message()));
    }
    package = std::move(*packed);
  }
  internal::QueueReport({metrics, std::move(package)});
}

}  // namespace troupe::train

// The worker actor, registered wherever the train library is linked (alwayslink).
TROUPE_REMOTE(troupe::train::internal::TrainWorker::Create,
              &troupe::train::internal::TrainWorker::Where,
              &troupe::train::internal::TrainWorker::Run,
              &troupe::train::internal::TrainWorker::PollReports);
