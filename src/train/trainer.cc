// DataParallelTrainer::Fit on the driver: place the workers, rank them, run the loop, collect
// reports and checkpoints, and restart the whole worker group after a failure — or, in elastic
// runs, drop the failed workers and let the others go on (src/train/elastic_coordinator.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
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
#include "src/train/elastic_coordinator.h"
#include "src/train/elastic_protocol.h"
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
// Replacements that may end before they join (a loop that fails on them, say) in one attempt
// before the driver stops starting more: a broken replacement is never restarted forever.
constexpr int kMaxLostReplacements = 3;

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
  bool elastic = false;    // elastic runs keep records under internal::ElasticPrefix

  ~Gang() {
    try {
      for (auto& worker : placed) worker.Kill();
      if (!collective_group.empty()) collective::DestroyGroup(collective_group);
      if (!host_group.empty()) collective::DestroyGroup(host_group);
      ::troupe::internal::Runtime* runtime = ::troupe::internal::CurrentRuntime();
      if (elastic && runtime != nullptr) {
        runtime->KvDelete(runtime->JobNamespace(), internal::ElasticPrefix(collective_group),
                          /*by_prefix=*/true);
      }
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
  if (scaling_.min_workers < 0 || scaling_.min_workers > scaling_.num_workers) {
    throw TroupeError(absl::StrCat("ScalingConfig.min_workers must be between 1 and num_workers (",
                                   scaling_.num_workers, "), or 0 for num_workers; got ",
                                   scaling_.min_workers));
  }
  if (scaling_.max_workers != 0 && scaling_.max_workers < scaling_.num_workers) {
    throw TroupeError(absl::StrCat(
        "ScalingConfig.max_workers must be 0 (no replacement workers) or at least num_workers (",
        scaling_.num_workers, "), got ", scaling_.max_workers,
        ": it is the most workers replacements may bring the run to"));
  }
  if (Elastic() && run_.failure_config.step_timeout.count() <= 0) {
    throw TroupeError("FailureConfig.step_timeout must be positive in elastic runs");
  }
  const auto hang = run_.failure_config.hang_timeout;
  if (Elastic() && hang.count() != 0 && hang < std::chrono::milliseconds(200)) {
    throw TroupeError(absl::StrCat("FailureConfig.hang_timeout is ", hang.count(),
                                   " ms: use 0 (off) or at least 200 ms"));
  }
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
  record.min_workers = MinWorkers();
  record.max_workers = scaling_.max_workers;
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
    MembershipEvent restart;
    restart.change = "restart";
    restart.why = failure;
    restart.world_size = scaling_.num_workers;
    restart.time_ms = NowMs();
    result.membership_events.push_back(restart);
    record.membership = result.membership_events;
    Log(absl::StrCat("restarting every worker from the latest checkpoint (restart ",
                     result.restarts, ")"));
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
  std::map<std::string, int> node_rank;
  std::vector<std::string> node_of_rank;
  for (const Slot& s : slots) {
    node_rank.emplace(s.node, static_cast<int>(node_rank.size()));
    node_of_rank.push_back(s.node);
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
  const std::vector<internal::NodePlace> places = internal::PlacesByRank(node_of_rank);
  for (int rank = 0; rank < scaling_.num_workers; ++rank) {
    const internal::NodePlace& p = places[rank];
    gang.workers.push_back(placed[slots[rank].bundle]);
    gang.ranks.push_back({rank, p.local_rank, scaling_.num_workers, p.local_world_size, p.node_rank,
                          cpus, *backend == collective::Backend::kNccl});
  }
  record.workers.clear();
  for (int rank = 0; rank < scaling_.num_workers; ++rank) {
    record.workers.push_back({rank, slots[rank].node, slots[rank].gpu});
  }
  PublishRunRecord(record);
  const std::string group = gang.collective_group = run_.name + "-" + RandomSuffix();
  // Host memory (metrics, Report's barrier) never goes through NCCL: a CPU group of the same
  // workers, declared whatever the main group's backend so both paths run the same code.
  gang.host_group = internal::HostGroupName(group);
  gang.elastic = Elastic();
  ::troupe::internal::Runtime& runtime = *::troupe::internal::CurrentRuntime();
  const std::string ns = runtime.JobNamespace();
  // Elastic runs: the coordinator declares each generation of both groups (worker w — rank w of
  // generation 1 — by its handle), after recording which ranks left.
  // Kills of excluded workers, in flight: the survivors must not wait for one (the generation
  // already fences the excluded worker out; the GCS waits up to 1 s for a cut-off raylet's
  // answer, and a GCS that is slow or restarting would hold the loop longer). Declared before the coordinator, so the
  // attempt's end waits for them after the coordinator is gone.
  std::vector<std::future<void>> kills;
  std::unique_ptr<internal::ElasticCoordinator> coordinator;
  if (!gang.elastic) {
    std::vector<int> ranks(scaling_.num_workers);
    for (int r = 0; r < scaling_.num_workers; ++r) ranks[r] = r;
    collective::CreateGroup(gang.workers, ranks, *backend, group);
    collective::CreateGroup(gang.workers, ranks, collective::Backend::kCpu, gang.host_group);
  } else {
    const collective::Backend main_backend = *backend;
    internal::ElasticCoordinator::Cluster cluster;
    cluster.declare = [&, main_backend](int64_t generation, const std::vector<int>& members,
                                        const std::vector<int>& left,
                                        const std::vector<int>& joined) {
      std::vector<std::string> ids;
      std::vector<int> ranks;
      for (size_t r = 0; r < members.size(); ++r) {
        ids.push_back(gang.workers[members[r]].binary_id());
        ranks.push_back(static_cast<int>(r));
      }
      collective::GroupOptions options;
      options.timeout = run_.failure_config.step_timeout;       // a member stuck this long failed
      options.hang_timeout = run_.failure_config.hang_timeout;  // a stopped one, sooner
      // Survivors regroup at once: a member that does not come is not waited for long.
      if (generation > 1) options.rendezvous_timeout = run_.failure_config.step_timeout;
      // Who left, and where each member now stands among the nodes (Context::node_rank, ...).
      std::vector<std::string> nodes;
      for (int worker : members) nodes.push_back(slots[worker].node);
      runtime.KvPut(ns, internal::GenerationKey(group, generation),
                    internal::EncodeGenerationRecord({left, internal::PlacesByRank(nodes)}),
                    /*overwrite=*/true);
      for (int worker : joined) {  // a replacement waits for this before it joins
        runtime.KvPut(ns, internal::JoinedKey(group, worker), std::to_string(generation),
                      /*overwrite=*/true);
      }
      collective::internal::DeclareGroup(ids, ranks, main_backend, group, options, generation,
                                         /*elastic=*/true);
      collective::internal::DeclareGroup(ids, ranks, collective::Backend::kCpu, gang.host_group,
                                         options, generation, /*elastic=*/true);
    };
    cluster.kill = [&](int worker) {
      kills.push_back(std::async(std::launch::async, [handle = gang.workers[worker]] {
        try {
          handle.Kill();
        } catch (const TroupeError&) {
          // Gone already.
        }
      }));
    };
    cluster.propose = [&](int64_t generation) {
      runtime.KvPut(ns, internal::JoinKey(group, generation), "1", /*overwrite=*/true);
    };
    coordinator = std::make_unique<internal::ElasticCoordinator>(
        scaling_.num_workers, MinWorkers(), scaling_.max_workers, std::move(cluster));
    coordinator->Start();
    for (size_t w = 0; w < gang.ranks.size(); ++w) {
      gang.ranks[w].insert(gang.ranks[w].end(), {1, run_.failure_config.step_timeout.count(), 1, 0,
                                                 static_cast<int64_t>(w), scaling_.max_workers});
    }
  }

  std::string resume;
  if (auto latest = checkpoints.Latest(); latest && attempt > 0) {
    auto packed = PackDirectory(latest->path, kMaxCheckpointPackageBytes);
    if (packed.ok()) resume = std::move(*packed);
    Log("restarting from " + latest->path);
  }
  Log(absl::StrCat(
      "attempt ", attempt + 1, ": ", scaling_.num_workers, " workers on ", node_rank.size(),
      " node(s), collective backend ", internal::BackendName(*backend),
      gang.elastic ? absl::StrCat(", elastic down to ", MinWorkers(), " workers",
                                  scaling_.max_workers > 0
                                      ? absl::StrCat(", replacements up to ", scaling_.max_workers)
                                      : "")
                   : ""));
  std::vector<ObjectRef<bool>> runs;
  for (int r = 0; r < scaling_.num_workers; ++r) {
    runs.push_back(gang.workers[r]
                       .Task(&TrainWorker::Run)
                       .Remote(loop_name, config_, gang.ranks[r], group, run_.name, resume));
  }

  // The workers holding ranks now, by rank (worker w started as rank w).
  auto members = [&] {
    if (coordinator) return coordinator->members();
    std::vector<int> all(scaling_.num_workers);
    for (int w = 0; w < scaling_.num_workers; ++w) all[w] = w;
    return all;
  };
  // Collect rank 0's reports while the loop runs, through one PollReports call at a time (so a
  // stopped or dead rank 0 never blocks the driver); at the end, until a poll comes back empty.
  std::optional<ObjectRef<std::vector<WireReport>>> poll;
  auto drain = [&](bool final) {
    while (true) {
      if (!poll) {
        const std::vector<int> now = members();
        if (now.empty()) return;  // every member died (elastic runs): their reports with them
        poll = gang.workers[now[0]].Task(&TrainWorker::PollReports).Remote();
      }
      if (!final && Wait(std::vector<ObjectRef<std::vector<WireReport>>>{*poll}, 1,
                         std::chrono::milliseconds(0))
                        .ready.empty()) {
        return;
      }
      std::vector<WireReport> reports;
      try {
        reports = *Get(*poll, std::chrono::milliseconds(10000));
      } catch (const TroupeError&) {
        poll.reset();
        return;  // rank 0 is gone (or stuck); its unsent reports are lost with it
      }
      poll.reset();
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
      if (!final || reports.empty()) return;
    }
  };
  std::string failure;
  std::vector<bool> done(runs.size(), false);
  int64_t reported_generation = 0;        // the last generation whose failure report was read
  std::vector<size_t> awaiting_recovery;  // events (in result) whose recovery is not timed yet
  // Replacements, by worker number (num_workers on): where each was placed once it answered,
  // and whether its loop runs (then it says when it is ready: internal::ReadyKey).
  std::vector<int> bundle_of;
  for (int w = 0; w < scaling_.num_workers; ++w) bundle_of.push_back(slots[w].bundle);
  std::map<int, ObjectRef<std::vector<std::string>>> starting;  // started, not answered yet
  std::set<int> announced;                                      // said they were ready
  auto start_replacement = [&] {
    const int w = static_cast<int>(gang.workers.size());
    // The bundle of a worker gone, if any (its resources come back once it is); else anywhere
    // the worker's resources fit. Placed whenever the cluster has room: nobody waits for it.
    std::set<int> used;
    for (int m : coordinator->members()) used.insert(bundle_of[m]);
    for (int m : coordinator->waiting()) used.insert(bundle_of[m]);
    int free = -1;
    for (int b = 0; b < scaling_.num_workers && free < 0; ++b) {
      if (!used.count(b)) free = b;
    }
    auto creator = Actor(TrainWorker::Create);
    creator.SetResources(bundle).SetMaxConcurrency(2);
    if (free >= 0) creator.SetPlacementGroup(gang.group, free);
    ActorHandle<TrainWorker> handle = creator.Remote();
    gang.placed.push_back(handle);
    gang.workers.push_back(handle);
    bundle_of.push_back(free);
    slots.push_back({free, "", -1, ""});
    runs.emplace_back();
    done.push_back(false);
    starting.emplace(w, handle.Task(&TrainWorker::Where).Remote());
    coordinator->OnReplacementStarted(w);
    Log(absl::StrCat("starting replacement worker ", w, " (", coordinator->members().size(), " of ",
                     scaling_.max_workers, " workers now)"));
  };
  int lost_replacements = 0;  // replacements that ended before they joined
  auto poll_replacements = [&] {
    while (coordinator->Vacancies() > 0 && lost_replacements < kMaxLostReplacements) {
      try {
        start_replacement();
      } catch (const TroupeError& e) {  // never a reason to stop the members
        Log(absl::StrCat("cannot start a replacement worker: ", e.what()));
        ++lost_replacements;
        break;
      }
    }
    for (auto it = starting.begin(); it != starting.end();) {
      const int w = it->first;
      if (Wait(std::vector<ObjectRef<std::vector<std::string>>>{it->second}, 1,
               std::chrono::milliseconds(0))
              .ready.empty()) {
        ++it;
        continue;
      }
      std::vector<std::string> where;
      try {
        where = *Get(it->second);
      } catch (const TroupeError&) {
        // It died starting: its Run below fails the same way, which withdraws it.
      }
      if (!where.empty()) {
        slots[w].node = where[0];
        slots[w].gpus = where[1];
        slots[w].gpu = where[1].empty() ? -1 : std::stoi(where[1]);
      }
      node_rank.emplace(slots[w].node, static_cast<int>(node_rank.size()));
      std::vector<int64_t> ranks = {
          -1, 0, 0, 1, node_rank[slots[w].node], cpus, *backend == collective::Backend::kNccl};
      ranks.insert(ranks.end(),
                   {1, run_.failure_config.step_timeout.count(), 0, 1, w, scaling_.max_workers});
      runs[w] = gang.workers[w]
                    .Task(&TrainWorker::Run)
                    .Remote(loop_name, config_, ranks, group, run_.name, std::string());
      it = starting.erase(it);
    }
    for (int w : coordinator->waiting()) {
      if (starting.count(w) || announced.count(w)) continue;
      auto text = runtime.KvGet(ns, internal::ReadyKey(group, w));
      int64_t asked_ms = 0;
      if (text && absl::SimpleAtoi(*text, &asked_ms)) {
        announced.insert(w);
        Log(absl::StrCat("replacement worker ", w, " (node ", slots[w].node.substr(0, 8),
                         ") is ready: it joins at the next step boundary"));
        coordinator->OnReady(w, asked_ms);
      }
    }
  };
  while (failure.empty()) {
    const std::vector<int> current = members();
    std::vector<ObjectRef<bool>> pending;
    for (int w : current) {
      if (!done[w]) pending.push_back(runs[w]);
    }
    if (pending.empty()) break;          // every member finished
    std::vector<int> watched = current;  // members, and replacements whose loop runs
    if (coordinator) {
      for (int w : coordinator->waiting()) {
        if (starting.count(w) || done[w]) continue;
        pending.push_back(runs[w]);
        watched.push_back(w);
      }
    }
    std::set<std::string> ready;  // until one finishes, or a while
    const auto poll = std::chrono::milliseconds(coordinator ? 20 : 200);
    for (const auto& ref : Wait(pending, 1, poll).ready) ready.insert(ref.ID());
    std::vector<internal::ElasticCoordinator::Failure> failures;
    for (int w : watched) {
      if (done[w] || !ready.count(runs[w].ID())) continue;
      done[w] = true;
      const bool member = std::find(current.begin(), current.end(), w) != current.end();
      // A replacement whose loop ended before it joined (it died, or failed starting): withdrawn
      // (killed, its vacancy open again); after kMaxLostReplacements no more are started.
      auto withdraw = [&](const std::string& why) {
        Log(absl::StrCat("replacement worker ", w, " ended before it joined: ", why));
        internal::ElasticCoordinator::Failure lost;
        lost.worker = w;
        lost.why = "failed";
        lost.detail = why;
        failures.push_back(std::move(lost));
        try {
          gang.workers[w].Kill();
        } catch (const TroupeError&) {
        }
        if (++lost_replacements == kMaxLostReplacements) {
          Log(absl::StrCat(lost_replacements,
                           " replacement workers ended before they joined: no more are started "
                           "in this attempt (the run goes on with the workers it has)"));
        }
      };
      try {
        Get(runs[w]);
        if (!member) withdraw("its loop returned");
      } catch (const TroupeError& e) {
        const int rank =
            static_cast<int>(std::find(current.begin(), current.end(), w) - current.begin());
        if (!member) {
          withdraw(e.what());
        } else if (coordinator && dynamic_cast<const ActorDiedError*>(&e) != nullptr) {
          internal::ElasticCoordinator::Failure died;
          died.worker = w;
          died.why = "died";
          died.detail = absl::StrCat("rank ", rank, ": ", e.what());
          died.time_ms = internal::UnixMs();
          failures.push_back(std::move(died));
        } else if (failure.empty()) {
          failure = absl::StrCat("rank ", rank, ": ", e.what());
        }
      }
    }
    if (coordinator && failure.empty()) {
      const int64_t generation = coordinator->generation();
      if (generation > reported_generation) {
        if (auto text = runtime.KvGet(ns, internal::FailureKey(group, generation))) {
          reported_generation = generation;
          if (auto report = internal::DecodeFailureReport(*text)) {
            internal::ElasticCoordinator::Failure reported;
            reported.generation = generation;
            reported.rank = report->failed_rank;
            reported.why = internal::ClassifyFailure(report->reason);
            reported.detail = absl::StrCat("rank ", report->reporter, " reported rank ",
                                           report->failed_rank, ": ", report->reason);
            reported.step = report->step;
            reported.time_ms = report->time_ms;
            failures.push_back(std::move(reported));
          }
        }
      }
      MembershipEvent event;
      const std::vector<int> before = coordinator->members();
      switch (failures.empty() ? internal::ElasticCoordinator::Verdict::kUnchanged
                               : coordinator->OnFailures(failures, &event)) {
        case internal::ElasticCoordinator::Verdict::kUnchanged:
        case internal::ElasticCoordinator::Verdict::kJoined:  // only OnBoundary's
          break;
        case internal::ElasticCoordinator::Verdict::kBelowMinimum:
          failure = absl::StrCat("rank(s) ", absl::StrJoin(event.ranks, ","), " ", event.why, " (",
                                 event.detail, "); ", event.world_size, " of ",
                                 scaling_.num_workers, " workers left, below min_workers ",
                                 MinWorkers(), ": restarting from the latest checkpoint");
          break;
        case internal::ElasticCoordinator::Verdict::kContinue: {
          std::vector<std::string> who;
          for (int rank : event.ranks) {
            who.push_back(
                absl::StrCat("rank ", rank, " (node ", slots[before[rank]].node.substr(0, 8), ")"));
          }
          Log(absl::StrCat("generation ", event.generation, ": ", absl::StrJoin(who, ", "),
                           " left (", event.why, ": ", event.detail, "); ", event.world_size,
                           " workers go on",
                           event.step >= 0 ? absl::StrCat(" from step ", event.step + 1) : "",
                           " without a restart"));
          awaiting_recovery.push_back(result.membership_events.size());
          result.membership_events.push_back(event);
          record.membership = result.membership_events;
          record.workers.clear();
          const std::vector<int> now = coordinator->members();
          for (size_t r = 0; r < now.size(); ++r) {
            record.workers.push_back({static_cast<int>(r), slots[now[r]].node, slots[now[r]].gpu});
          }
          PublishRunRecord(record);
          break;
        }
      }
      // Replacements: start them, hear when they are ready, and add them at the boundary the
      // members answer from.
      if (failure.empty()) poll_replacements();
      if (const int64_t proposed = coordinator->proposed(); failure.empty() && proposed > 0) {
        int64_t step = -1;
        auto text = runtime.KvGet(ns, internal::BoundaryKey(group, proposed));
        if (text && absl::SimpleAtoi(*text, &step)) {
          MembershipEvent joined;
          if (coordinator->OnBoundary(proposed, step, &joined) ==
              internal::ElasticCoordinator::Verdict::kJoined) {
            const std::vector<int> now = coordinator->members();
            std::vector<std::string> who;
            for (int rank : joined.ranks) {
              who.push_back(absl::StrCat("worker ", now[rank], " as rank ", rank, " (node ",
                                         slots[now[rank]].node.substr(0, 8), ")"));
            }
            joined.detail = absl::StrJoin(who, ", ");
            Log(absl::StrCat("generation ", joined.generation, ": ", joined.detail,
                             " joined (replacement) after step ", step, "; ", joined.world_size,
                             " workers go on, the newcomers with rank 0's model and optimizer"));
            awaiting_recovery.push_back(result.membership_events.size());
            result.membership_events.push_back(joined);
            record.membership = result.membership_events;
            record.workers.clear();
            for (size_t r = 0; r < now.size(); ++r) {
              record.workers.push_back(
                  {static_cast<int>(r), slots[now[r]].node, slots[now[r]].gpu});
            }
            PublishRunRecord(record);
          }
        }
      }
      // The first step each change's survivors committed: the recovery's end.
      for (auto it = awaiting_recovery.begin(); it != awaiting_recovery.end();) {
        MembershipEvent& change = result.membership_events[*it];
        auto text = runtime.KvGet(ns, internal::RecoveredKey(group, change.generation));
        auto recovered = text ? internal::DecodeRecovered(*text) : std::nullopt;
        if (!recovered) {
          ++it;
          continue;
        }
        change.recovery_s = std::max<int64_t>(0, recovered->time_ms - change.time_ms) / 1000.0;
        if (change.step < 0) change.step = recovered->step - 1;
        Log(absl::StrFormat("generation %d: step %d committed on %d workers %.3f s after the %s",
                            change.generation, recovered->step, change.world_size,
                            change.recovery_s,
                            change.change == "joined" ? "join request" : "failure"));
        record.membership = result.membership_events;
        PublishRunRecord(record);
        it = awaiting_recovery.erase(it);
      }
    }
    drain(/*final=*/false);
  }
  drain(/*final=*/true);
  return failure;  // ~Gang tears the attempt down
}

int DataParallelTrainer::MinWorkers() const {
  return scaling_.min_workers == 0 ? scaling_.num_workers : scaling_.min_workers;
}

bool DataParallelTrainer::Elastic() const {
  return MinWorkers() < scaling_.num_workers || scaling_.max_workers > 0;
}

void DataParallelTrainer::Log(const std::string& line) const {
  if (run_.verbose) std::fprintf(stderr, "[train %s] %s\n", run_.name.c_str(), line.c_str());
}

}  // namespace troupe::train
