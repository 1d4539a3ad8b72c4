// DataParallelTrainer::Fit on the driver: place the workers, rank them, run the loop, collect
// reports and checkpoints, and restart the whole worker group after a failure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/common/package.h"
#include "src/train/checkpoints.h"
#include "src/train/collective_choice.h"
#include "src/train/run_record.h"
#include "src/train/worker.h"
#include "troupe/api.h"
#include "troupe/collective.h"
#include "troupe/runtime.h"

namespace troupe::train {
namespace {

using internal::TrainWorker;
using internal::WireReport;

constexpr auto kPlacementTimeout = std::chrono::seconds(60);

int StrategyIndex(const std::string& name) {
  static const char* kNames[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};
  for (int i = 0; i < 4; ++i) {
    if (name == kNames[i]) return i;
  }
  throw TroupeError(
      "ScalingConfig.placement_strategy must be PACK, SPREAD, STRICT_PACK or "
      "STRICT_SPREAD, got '" +
      name + "'");
}

std::string FormatMetrics(const Metrics& metrics) {
  std::vector<std::string> parts;
  for (const auto& [key, value] : metrics) parts.push_back(absl::StrFormat("%s=%.6g", key, value));
  return absl::StrJoin(parts, " ");
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The hex id of this driver's job ("job-<hex>" is its KV namespace).
std::string DriverJobId() {
  ::troupe::internal::Runtime* runtime = ::troupe::internal::CurrentRuntime();
  if (runtime == nullptr) return "";
  std::string ns = runtime->JobNamespace();
  return ns.rfind("job-", 0) == 0 ? ns.substr(4) : ns;
}

std::string RandomSuffix() {
  std::random_device random;
  return absl::StrFormat("%08x", random());
}

// One attempt: the placed workers and their ranks. Its destructor tears the attempt down
// whatever happened: the workers, their collective group and their bundles.
struct Gang {
  PlacementGroup group;
  std::vector<ActorHandle<TrainWorker>> placed;   // by bundle
  std::vector<ActorHandle<TrainWorker>> workers;  // by rank
  std::vector<std::vector<int64_t>> ranks;        // per worker: the Context numbers
  std::string collective_group;
  std::string host_group;  // its CPU side group (Context::host_group)

  ~Gang() {
    try {
      for (auto& worker : placed) worker.Kill();
      if (!collective_group.empty()) collective::DestroyGroup(collective_group);
      if (!host_group.empty()) collective::DestroyGroup(host_group);
      if (!group.IsNil()) RemovePlacementGroup(group);
    } catch (const TroupeError&) {
      // The cluster is going away; nothing more to free.
    }
  }
};

}  // namespace

DataParallelTrainer::DataParallelTrainer(TrainLoopFn loop, LoopConfig config, ScalingConfig scaling,
                                         RunConfig run)
    : loop_(loop), config_(std::move(config)), scaling_(std::move(scaling)), run_(std::move(run)) {}

Result DataParallelTrainer::Fit() {
  const std::string loop_name = internal::TrainLoopName(loop_);
  if (loop_name.empty()) {
    throw TroupeError(
        "the train loop is not registered: add TROUPE_TRAIN_LOOP(<your loop>) at "
        "namespace scope in a .cc file of this executable");
  }
  if (scaling_.num_workers < 1) throw TroupeError("ScalingConfig.num_workers must be >= 1");
  std::map<std::string, double> bundle = scaling_.resources_per_worker;
  if (!bundle.count("CPU")) bundle["CPU"] = 1;
  if (scaling_.use_gpu && !bundle.count("GPU")) bundle["GPU"] = 1;
  const int strategy = StrategyIndex(scaling_.placement_strategy);
  const int cpus = std::max(1, static_cast<int>(bundle["CPU"]));
  if (absl::Status status = internal::CheckCollectiveBackend(
          scaling_.collective_backend, scaling_.use_gpu, bundle.count("GPU") ? bundle["GPU"] : 0);
      !status.ok()) {
    throw TroupeError(std::string(status.message()));
  }

  CheckpointStore checkpoints(ExpandHome(run_.storage_path) + "/" + run_.name,
                              run_.checkpoint_config);
  Result result;
  RunRecord record;
  record.name = run_.name;
  record.start_time_ms = NowMs();
  record.run_id = NewRunId(run_.name, record.start_time_ms);
  record.job_id = DriverJobId();
  record.num_workers = scaling_.num_workers;
  record.use_gpu = scaling_.use_gpu;
  record.strategy = scaling_.placement_strategy;
  record.resources_per_worker = bundle;
  record.storage_path = ExpandHome(run_.storage_path) + "/" + run_.name;
  PublishRunRecord(record);
  // Every return below publishes how the run ended.
  auto finish = [&](Result done) {
    record.status = done.error.empty() ? "FINISHED" : "FAILED";
    record.error = done.error;
    record.restarts = done.restarts;
    record.end_time_ms = NowMs();
    record.checkpoints = checkpoints.kept();
    PublishRunRecord(record);
    return done;
  };

  for (int attempt = 0;; ++attempt) {
    std::string failure;
    record.attempt = attempt;
    record.restarts = result.restarts;
    try {
      failure = RunAttempt(attempt, bundle, strategy, cpus, loop_name, checkpoints, record, result);
    } catch (const TroupeError& e) {  // e.g. a worker that could not be started
      failure = std::string("starting the workers failed: ") + e.what();
    }
    result.best_checkpoint = checkpoints.Best();
    result.latest_checkpoint = checkpoints.Latest();
    if (failure.empty() || !result.error.empty()) return finish(std::move(result));
    Log("worker failure: " + failure);
    const int allowed = run_.failure_config.max_failures;
    if (allowed >= 0 && attempt >= allowed) {
      result.error = failure;
      return finish(std::move(result));
    }
    ++result.restarts;
  }
}

std::string DataParallelTrainer::RunAttempt(int attempt,
                                            const std::map<std::string, double>& bundle,
                                            int strategy, int cpus, const std::string& loop_name,
                                            CheckpointStore& checkpoints, RunRecord& record,
                                            Result& result) {
  // Place one bundle per worker, start a worker in each, and rank them by node then GPU.
  Gang gang;
  std::vector<ActorHandle<TrainWorker>>& placed = gang.placed;
  gang.group = CreatePlacementGroup(
      {run_.name + "-" + RandomSuffix(),
       std::vector<std::map<std::string, double>>(scaling_.num_workers, bundle),
       static_cast<PlacementStrategy>(strategy)});
  if (!gang.group.Wait(kPlacementTimeout)) {
    return result.error = absl::StrCat("cannot place ", scaling_.num_workers, " workers of ",
                                       FormatMetrics(bundle), " (", scaling_.placement_strategy,
                                       ") within 60 s: the cluster lacks the resources");
  }
  std::vector<ObjectRef<std::vector<std::string>>> where;
  for (int i = 0; i < scaling_.num_workers; ++i) {
    placed.push_back(Actor(TrainWorker::Create)
                         .SetResources(bundle)
                         .SetPlacementGroup(gang.group, i)
                         .SetMaxConcurrency(2)  // Run and PollReports side by side
                         .Remote());
    where.push_back(placed.back().Task(&TrainWorker::Where).Remote());
  }
  struct Slot {
    int bundle;
    std::string node;
    int gpu;           // the first leased GPU (-1: none), to order ranks
    std::string gpus;  // every leased GPU, "a,b"
  };
  std::vector<Slot> slots;
  std::map<std::string, int> node_first_bundle;
  for (int i = 0; i < scaling_.num_workers; ++i) {
    auto w = *Get(where[i]);
    const int gpu = w[1].empty() ? -1 : std::stoi(w[1]);
    slots.push_back({i, w[0], gpu, w[1]});
    node_first_bundle.emplace(w[0], i);
  }
  std::sort(slots.begin(), slots.end(), [&](const Slot& a, const Slot& b) {
    return std::make_tuple(node_first_bundle[a.node], a.gpu, a.bundle) <
           std::make_tuple(node_first_bundle[b.node], b.gpu, b.bundle);
  });
  std::map<std::string, int> node_rank, local_count;
  for (const Slot& s : slots) {
    node_rank.emplace(s.node, static_cast<int>(node_rank.size()));
    ++local_count[s.node];
  }
  std::vector<internal::WorkerGpus> gpus_by_rank;
  for (const Slot& s : slots) {
    internal::WorkerGpus worker{s.node, {}};
    for (absl::string_view id : absl::StrSplit(s.gpus, ',', absl::SkipEmpty())) {
      int gpu;
      if (absl::SimpleAtoi(id, &gpu)) worker.gpus.push_back(gpu);
    }
    gpus_by_rank.push_back(std::move(worker));
  }
  const auto it = bundle.find("GPU");
  auto backend =
      internal::ChooseCollectiveBackend(scaling_.collective_backend, scaling_.use_gpu,
                                        it == bundle.end() ? 0 : it->second, gpus_by_rank);
  if (!backend.ok()) return result.error = std::string(backend.status().message());
  std::map<std::string, int> local_next;
  for (int rank = 0; rank < scaling_.num_workers; ++rank) {
    const Slot& s = slots[rank];
    gang.workers.push_back(placed[s.bundle]);
    gang.ranks.push_back({rank, local_next[s.node]++, scaling_.num_workers, local_count[s.node],
                          node_rank[s.node], cpus, *backend == collective::Backend::kNccl});
  }
  record.workers.clear();
  for (int rank = 0; rank < scaling_.num_workers; ++rank) {
    record.workers.push_back({rank, slots[rank].node, slots[rank].gpu});
  }
  PublishRunRecord(record);
  const std::string group = gang.collective_group = run_.name + "-" + RandomSuffix();
  std::vector<int> ranks(scaling_.num_workers);
  for (int r = 0; r < scaling_.num_workers; ++r) ranks[r] = r;
  collective::CreateGroup(gang.workers, ranks, *backend, group);
  // Host memory (metrics, Report's barrier) never goes through NCCL: a CPU group of the same
  // workers, declared whatever the main group's backend so both paths run the same code.
  gang.host_group = internal::HostGroupName(group);
  collective::CreateGroup(gang.workers, ranks, collective::Backend::kCpu, gang.host_group);

  std::string resume;
  if (auto latest = checkpoints.Latest(); latest && attempt > 0) {
    auto packed = PackDirectory(latest->path, kMaxCheckpointPackageBytes);
    if (packed.ok()) resume = std::move(*packed);
    Log("restarting from " + latest->path);
  }
  Log(absl::StrCat("attempt ", attempt + 1, ": ", scaling_.num_workers, " workers on ",
                   node_rank.size(), " node(s), collective backend ",
                   internal::BackendName(*backend)));
  std::vector<ObjectRef<bool>> runs;
  for (int r = 0; r < scaling_.num_workers; ++r) {
    runs.push_back(gang.workers[r]
                       .Task(&TrainWorker::Run)
                       .Remote(loop_name, config_, gang.ranks[r], group, run_.name, resume));
  }

  // Collect rank 0's reports while the loop runs; stop at the first failure.
  auto drain = [&] {
    std::vector<WireReport> reports;
    try {
      reports = *Get(gang.workers[0].Task(&TrainWorker::PollReports).Remote());
    } catch (const TroupeError&) {
      return;  // rank 0 is gone; its unsent reports are lost with it
    }
    for (auto& [metrics, package] : reports) {
      result.metrics = metrics;
      result.metrics_history.push_back(metrics);
      std::string line = FormatMetrics(metrics);
      if (!package.empty()) {
        auto path = checkpoints.Add(package, metrics);
        if (path.ok()) {
          absl::StrAppend(&line, " | checkpoint ", *path);
        } else {
          absl::StrAppend(&line, " | checkpoint NOT saved: ", path.status().message());
        }
      }
      Log(line);
      record.metrics.push_back(metrics);
    }
    if (!reports.empty()) {
      record.checkpoints = checkpoints.kept();
      PublishRunRecord(record);
    }
  };
  std::string failure;
  size_t finished = 0;
  std::vector<bool> done(runs.size(), false);
  while (finished < runs.size() && failure.empty()) {
    std::vector<ObjectRef<bool>> pending;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (!done[i]) pending.push_back(runs[i]);
    }
    std::set<std::string> ready;  // until one finishes, or a while
    for (const auto& ref : Wait(pending, 1, std::chrono::milliseconds(200)).ready) {
      ready.insert(ref.ID());
    }
    for (size_t i = 0; i < runs.size(); ++i) {
      if (done[i] || !ready.count(runs[i].ID())) continue;
      done[i] = true;
      ++finished;
      try {
        Get(runs[i]);
      } catch (const TroupeError& e) {
        if (failure.empty()) failure = absl::StrCat("rank ", i, ": ", e.what());
      }
    }
    drain();
  }
  return failure;  // ~Gang tears the attempt down
}

void DataParallelTrainer::Log(const std::string& line) const {
  if (run_.verbose) std::fprintf(stderr, "[train %s] %s\n", run_.name.c_str(), line.c_str());
}

}  // namespace troupe::train
