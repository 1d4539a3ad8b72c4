#include "src/train/worker.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "src/common/package.h"
#include "src/train/elastic_protocol.h"
#include "troupe/api.h"
#include "troupe/collective.h"
#include "troupe/runtime.h"

namespace troupe::train {
namespace {

std::mutex mu;
Context context;
std::optional<std::string> resume_dir;
std::vector<internal::WireReport> queued;  // rank 0's reports not yet polled

// The step accounting of elastic runs (worker.h). Touched by the loop's thread only (the
// recoverable operations run on it); `mu` guards it for LastStepOutcome from anywhere.
struct ElasticState {
  std::chrono::milliseconds step_timeout{30000};
  int64_t sync_points = 0;  // recoverable operations completed
  int64_t steps = 0;        // steps committed
  // The step in progress: its generation and world size, and the ranks (of that generation)
  // still present, by current rank.
  int64_t step_generation = 0;
  int step_world = 1;
  std::vector<int> step_members;
  StepOutcome last;
  int64_t failure_ms = 0;  // the first failure noticed since the last commit (0: none)
};
ElasticState elastic;

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
    context.elastic = ranks.size() > 9 && ranks[7] == 1;
    context.generation = context.elastic ? ranks[9] : 0;
    elastic = ElasticState();
    if (context.elastic) elastic.step_timeout = std::chrono::milliseconds(ranks[8]);
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

void BeginStep() {
  std::lock_guard<std::mutex> lock(mu);
  elastic.step_generation = context.generation;
  elastic.step_world = context.world_size;
  elastic.step_members.resize(context.world_size);
  std::iota(elastic.step_members.begin(), elastic.step_members.end(), 0);
}

void CommitStep() {
  int64_t failure_ms = 0, step = 0, generation = 0;
  std::string group;
  {
    std::lock_guard<std::mutex> lock(mu);
    ++elastic.steps;
    ++elastic.sync_points;
    StepOutcome outcome;
    outcome.step = elastic.steps;
    outcome.generation = elastic.step_generation;
    outcome.world_size = elastic.step_world;
    for (int rank = 0; rank < elastic.step_world; ++rank) {
      if (std::find(elastic.step_members.begin(), elastic.step_members.end(), rank) ==
          elastic.step_members.end()) {
        outcome.lost_ranks.push_back(rank);
      }
    }
    elastic.last = std::move(outcome);
    std::swap(failure_ms, elastic.failure_ms);
    step = elastic.steps;
    generation = context.generation;
    group = context.group;
  }
  if (failure_ms == 0) return;
  // The first step committed since a failure: the driver times the recovery by it.
  if (auto* runtime = ::troupe::internal::CurrentRuntime()) {
    try {
      runtime->KvPut(runtime->JobNamespace(), RecoveredKey(group, generation),
                     EncodeRecovered({step, UnixMs()}), /*overwrite=*/false);
    } catch (const TroupeError&) {
      // For display only.
    }
  }
}

void CompleteSyncPoint() {
  std::lock_guard<std::mutex> lock(mu);
  ++elastic.sync_points;
}

namespace {

namespace coll = ::troupe::collective;

// Joins the newest declared generation of both of the workers' groups (declared one after the
// other by the driver, so one may lag for a moment); returns the generation both hold.
// `joining`: the generation being joined, when a join fails.
int64_t JoinNextGeneration(const Context& ctx, std::chrono::steady_clock::time_point deadline,
                           int64_t* joining) {
  int64_t main = coll::internal::RefreshGroup(ctx.group, joining);
  int64_t host = coll::internal::RefreshGroup(ctx.host_group, joining);
  while (main != host) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw TroupeError(
          absl::StrCat("elastic training: the workers' groups stayed at different "
                       "generations (",
                       main, " and ", host, ") past the step timeout"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    main = coll::internal::RefreshGroup(ctx.group, joining);
    host = coll::internal::RefreshGroup(ctx.host_group, joining);
  }
  return main;
}

}  // namespace

bool RecoverFromPeerFailure(const coll::CollectiveError& error) {
  if (dynamic_cast<const coll::ExcludedError*>(&error) != nullptr) return false;
  Context& ctx = context;  // written by this thread only (see ElasticState)
  if (!ctx.elastic || error.rank() < 0) return false;
  ::troupe::internal::Runtime* runtime = ::troupe::internal::CurrentRuntime();
  if (runtime == nullptr) return false;
  const std::string ns = runtime->JobNamespace();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (elastic.failure_ms == 0) elastic.failure_ms = UnixMs();
  }
  int64_t failed_generation = ctx.generation;
  int failed_rank = error.rank();
  std::string reason = error.what();
  const auto deadline = std::chrono::steady_clock::now() + elastic.step_timeout;
  while (true) {
    // Tell the driver (the first report of a generation is the one it reads).
    FailureReport report{ctx.world_rank, failed_rank, elastic.steps, UnixMs(), reason};
    runtime->KvPut(ns, FailureKey(ctx.group, failed_generation), EncodeFailureReport(report),
                   /*overwrite=*/false);
    int64_t target = 0, joining = 0;
    while ((target = std::min(coll::internal::DeclaredGeneration(ctx.group),
                              coll::internal::DeclaredGeneration(ctx.host_group))) <=
           failed_generation) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw TroupeError(absl::StrCat(
            "elastic training: rank ", ctx.world_rank, " reported rank ", failed_rank,
            " of generation ", failed_generation, " failed (", reason,
            "), but the driver declared no next generation within the step timeout (",
            elastic.step_timeout.count(), " ms): the run restarts from its checkpoint"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    try {
      const int64_t previous = ctx.generation;
      const int64_t joined = JoinNextGeneration(ctx, deadline, &joining);
      joining = joined;  // from here on, failures are the joined generation's
      // Which ranks each generation since the held one dropped: the step's lost shares.
      std::vector<int> members;
      {
        std::lock_guard<std::mutex> lock(mu);
        members = elastic.step_members;
      }
      for (int64_t g = previous + 1; g <= joined; ++g) {
        auto record = runtime->KvGet(ns, GenerationKey(ctx.group, g));
        auto left = record ? DecodeRanks(*record) : std::nullopt;
        if (!left) {
          throw TroupeError(absl::StrCat("elastic training: generation ", g, " of group '",
                                         ctx.group, "' has no readable record of who left"));
        }
        members = WithoutRanks(members, *left);
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        elastic.step_members = members;
        ctx.world_rank = coll::GetRank(ctx.group);
        ctx.world_size = coll::GetWorldSize(ctx.group);
        ctx.generation = joined;
      }
      // Every survivor must redo the same operation: the same count of synchronisation points
      // behind it. A member that completed the failed one before the failure reached it has
      // moved on (its optimizer stepped with the lost member's gradients): no redo can match it.
      int64_t points[2] = {elastic.sync_points, -elastic.sync_points};
      coll::AllReduce(points, 2, coll::DataType::kInt64, coll::ReduceOp::kMax, ctx.host_group);
      if (points[0] != -points[1]) {
        throw TroupeError(absl::StrCat(
            "elastic training: after rank ", failed_rank, " of generation ", failed_generation,
            " failed, the survivors stand at different synchronisation points (", -points[1],
            " to ", points[0],
            "): some completed the step before the failure reached them, so it cannot be "
            "redone alike everywhere; the run restarts from its checkpoint"));
      }
      return true;
    } catch (const coll::ExcludedError&) {
      throw;
    } catch (const coll::CollectiveError& again) {
      if (again.rank() < 0) throw;
      // Another member failed while the survivors regrouped: report it in turn, as a rank of
      // the generation it failed in.
      failed_generation = joining > 0 ? joining : ctx.generation;
      failed_rank = again.rank();
      reason = again.what();
    }
  }
}

}  // namespace internal

StepOutcome LastStepOutcome() {
  std::lock_guard<std::mutex> lock(mu);
  return elastic.last;
}

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
  // the CPU side group: a host-side wait, whatever the main group's backend. In elastic runs a
  // member's failure here regroups the survivors, who wait again.
  while (ctx.world_size > 1) {
    try {
      collective::Barrier(ctx.host_group);
      break;
    } catch (const collective::CollectiveError& e) {
      if (!internal::RecoverFromPeerFailure(e)) throw;
    }
  }
  internal::CompleteSyncPoint();
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
