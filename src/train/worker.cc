#include "src/train/worker.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/common/package.h"
#include "src/train/elastic_protocol.h"
#include "src/train/state_transfer.h"
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
  // Replacements (ScalingConfig::max_workers).
  int worker = -1;                   // this worker's number on the driver
  int max_workers = 0;               // 0: no replacements
  bool joining = false;              // a replacement that has not joined yet
  bool progress_known = true;        // false on a replacement until it received steps/sync points
  bool awaiting_loop_state = false;  // joined; EnableReplacements has not received yet
  bool skip_boundary = false;        // its first step boundary is the one it joined at
  bool needs_state = false;          // a replacement until its state transfer completed
  std::vector<int> receivers;        // the transfer under way: the ranks that receive state
  int64_t part_ms[3] = {0, 0, 0};    // the transfer under way: each part's time
};
ElasticState elastic;
// What travels to a replacement, registered by the loop's objects (worker.h); loop thread only.
std::function<void(bool receiving)> model_share;
std::function<void(bool receiving)> loop_share;

std::map<std::string, TrainLoopFn>& Loops() {
  static auto* loops = new std::map<std::string, TrainLoopFn>();
  return *loops;
}

// Checkpoints may hold a whole model: allow far more than a working directory.
constexpr int64_t kMaxCheckpointBytes = kMaxCheckpointPackageBytes;

// Where a worker unpacks the checkpoint it resumes from: <temp>/<prefix><pid>-<group>.
constexpr char kResumePrefix[] = "troupe-resume-";

// Removes the resume directories of worker processes that no longer exist. A worker removes its
// own when Run ends, but one SIGKILLed (the driver kills an attempt's workers when it fails, or
// restarts an elastic run from its checkpoint) cannot: the next Run on the machine does.
void RemoveResumeDirsOfDeadWorkers() {
  std::error_code error;
  std::filesystem::directory_iterator entries(std::filesystem::temp_directory_path(error), error);
  for (; !error && entries != std::filesystem::directory_iterator(); entries.increment(error)) {
    const std::string name = entries->path().filename().string();
    if (name.rfind(kResumePrefix, 0) != 0) continue;
    const size_t start = sizeof(kResumePrefix) - 1, dash = name.find('-', start);
    int pid = 0;
    if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(start, dash - start), &pid) ||
        pid <= 0 || pid == getpid()) {
      continue;
    }
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (EPERM: another user's)
    std::error_code ignored;
    std::filesystem::remove_all(entries->path(), ignored);
  }
}

// Removes this worker's resume directory, if any (the loop is over: nothing reads it again).
void RemoveResumeDir() {
  std::lock_guard<std::mutex> lock(mu);
  if (!resume_dir) return;
  std::error_code ignored;
  std::filesystem::remove_all(*resume_dir, ignored);
  resume_dir.reset();
}

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
  RemoveResumeDirsOfDeadWorkers();
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
    if (context.elastic && ranks.size() > 12) {
      context.replacement = elastic.joining = elastic.needs_state = ranks[10] == 1;
      elastic.worker = static_cast<int>(ranks[11]);
      elastic.max_workers = static_cast<int>(ranks[12]);
      elastic.progress_known = !elastic.joining;
    }
    model_share = nullptr;
    loop_share = nullptr;
    resume_dir.reset();
    if (!checkpoint.empty()) {
      const std::string dir = absl::StrCat(std::filesystem::temp_directory_path().string(), "/",
                                           kResumePrefix, getpid(), "-", group);
      std::error_code error;
      std::filesystem::remove_all(dir, error);
      if (auto status = UnpackDirectory(checkpoint, dir, PackageLimits::Checkpoint());
          !status.ok()) {
        std::filesystem::remove_all(dir, error);  // what was unpacked before the failure
        throw TroupeError("cannot unpack the checkpoint to resume from: " +
                          std::string(status.message()));
      }
      resume_dir = dir;
    }
  }
  // Intra-op threads match the CPUs reserved for this worker (as torchrun's OMP_NUM_THREADS),
  // so N workers on N cores do not fight. Libraries read this when they start their pools.
  setenv("OMP_NUM_THREADS", std::to_string(context.cpus).c_str(), 1);
  // However the loop ends (returns, throws, is excluded): its state goes.
  struct ClearLoopState {
    ~ClearLoopState() {
      model_share = nullptr;  // they point into the loop's frame
      loop_share = nullptr;
      RemoveResumeDir();
    }
  } clear;
  try {
    loop->second(config);
  } catch (const collective::ExcludedError& e) {
    // Fenced: the group went on without this member (it was reported failed, hung or cut off).
    // It contributed nothing after that; it ends here, cleanly, and the driver does not count
    // it (it may start a replacement instead).
    std::fprintf(stderr, "[train] this worker was excluded from the group and stops: %s\n",
                 e.what());
    return false;
  } catch (const collective::CollectiveError& e) {
    // Elastic runs: the operations that regroup never let a peer's failure out (they recover,
    // or fail with a TroupeError saying why). One that got here came from a collective that does
    // not regroup — the loop's own, most likely: say so, and what to use instead.
    if (!context.elastic || e.rank() < 0) throw;
    throw collective::CollectiveError(ElasticCollectiveFailure(e), e.group(), e.op(), e.rank());
  }
  return true;
}

std::string ElasticCollectiveFailure(const collective::CollectiveError& error) {
  return absl::StrCat(
      error.what(), " -- elastic training: rank ", error.rank(),
      " failed or left, so the workers' membership changes, but this collective (", error.op(),
      " on group '", error.group(),
      "') does not regroup: only SynchronizeGradients, SumAcrossWorkers, Report and the "
      "sampler's step boundary carry on without a lost member. A collective of the loop's own "
      "on GetContext().group or host_group (or PrepareModel's first broadcast) ends the loop, "
      "and the run restarts from its checkpoint. Sum host values with "
      "troupe::train::torch::SumAcrossWorkers and wait for every worker with Report instead.");
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

int64_t MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

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

// The driver's record of generation `generation` (who left, where each rank stands).
GenerationRecord ReadGenerationRecord(::troupe::internal::Runtime& runtime,
                                      const std::string& group, int64_t generation) {
  auto text = runtime.KvGet(runtime.JobNamespace(), GenerationKey(group, generation));
  auto record = text ? DecodeGenerationRecord(*text) : std::nullopt;
  if (!record) {
    throw TroupeError(absl::StrCat("elastic training: generation ", generation, " of group '",
                                   group, "' has no readable record of its members"));
  }
  return *std::move(record);
}

// Waits (up to the step timeout) for a generation newer than `after`, joins it (both groups),
// updates the Context and checks that every member stands at the same synchronisation point.
// `failed_rank` >= 0: a rank of generation `after` failed (`reason`), reported to the driver
// first; -1: nothing to report (the members wait at a step boundary for the generation that
// adds replacements, or a replacement waits for its first). Throws as RecoverFromPeerFailure.
void Regroup(::troupe::internal::Runtime& runtime, int64_t after, int failed_rank,
             std::string reason) {
  Context& ctx = context;  // written by this thread only (see ElasticState)
  const std::string ns = runtime.JobNamespace();
  int64_t failed_generation = after;
  const auto entered = std::chrono::steady_clock::now();
  const auto deadline = entered + elastic.step_timeout;
  while (true) {
    // Tell the driver (the first report of a generation is the one it reads).
    if (failed_rank >= 0) {
      FailureReport report{ctx.world_rank, failed_rank, elastic.steps, UnixMs(), reason};
      runtime.KvPut(ns, FailureKey(ctx.group, failed_generation), EncodeFailureReport(report),
                    /*overwrite=*/false);
    }
    int64_t target = 0, joining = 0;
    while ((target = std::min(coll::internal::DeclaredGeneration(ctx.group),
                              coll::internal::DeclaredGeneration(ctx.host_group))) <=
           failed_generation) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw TroupeError(absl::StrCat(
            "elastic training: rank ", ctx.world_rank,
            failed_rank >= 0 ? absl::StrCat(" reported rank ", failed_rank, " of generation ",
                                            failed_generation, " failed (", reason, ")")
                             : absl::StrCat(" waited at a step boundary for the generation after ",
                                            failed_generation, " (replacements joining)"),
            ", but the driver declared no next generation within the step timeout (",
            elastic.step_timeout.count(), " ms): the run restarts from its checkpoint"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const int64_t declared_ms = MsSince(entered);
    try {
      const int64_t previous = ctx.generation;
      const int64_t joined = JoinNextGeneration(ctx, deadline, &joining);
      const int64_t joined_ms = MsSince(entered);
      joining = joined;  // from here on, failures are the joined generation's
      // Which ranks each generation since the held one dropped: the step's lost shares.
      std::vector<int> members;
      {
        std::lock_guard<std::mutex> lock(mu);
        members = elastic.step_members;
      }
      for (int64_t g = std::max<int64_t>(previous + 1, 2); g <= joined && previous > 0; ++g) {
        members = WithoutRanks(members, ReadGenerationRecord(runtime, ctx.group, g).left);
      }
      // Where this member now stands among the nodes: the joined generation's record.
      const int rank = coll::GetRank(ctx.group), world_size = coll::GetWorldSize(ctx.group);
      const std::vector<NodePlace> places = ReadGenerationRecord(runtime, ctx.group, joined).places;
      if (static_cast<int>(places.size()) != world_size || rank < 0 || rank >= world_size) {
        throw TroupeError(absl::StrCat("elastic training: generation ", joined, " of group '",
                                       ctx.group, "' places ", places.size(),
                                       " members, but the group has ", world_size));
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        elastic.step_members = members;
        ctx.world_rank = rank;
        ctx.world_size = world_size;
        ctx.node_rank = places[rank].node_rank;
        ctx.local_rank = places[rank].local_rank;
        ctx.local_world_size = places[rank].local_world_size;
        ctx.generation = joined;
        elastic.joining = false;
      }
      // Every survivor must redo the same operation: the same count of synchronisation points
      // behind it. A member that completed the failed one before the failure reached it has
      // moved on (its optimizer stepped with the lost member's gradients, or it left a state
      // transfer to a replacement for its next step): no redo can match it. A replacement that
      // has not received the count yet takes no side.
      int64_t points[2] = {elastic.sync_points, -elastic.sync_points};
      if (!elastic.progress_known) {
        points[0] = points[1] = std::numeric_limits<int64_t>::min();
      }
      coll::AllReduce(points, 2, coll::DataType::kInt64, coll::ReduceOp::kMax, ctx.host_group);
      if (elastic.progress_known && points[0] != -points[1]) {
        throw TroupeError(absl::StrCat(
            "elastic training: after ",
            failed_rank >= 0 ? absl::StrCat("rank ", failed_rank, " of generation ",
                                            failed_generation, " failed")
                             : absl::StrCat("generation ", failed_generation, " changed"),
            ", the survivors stand at different synchronisation points (", -points[1], " to ",
            points[0],
            "): some completed the operation (a step, or the state transfer to a replacement) "
            "before the failure reached them, so it cannot be redone alike everywhere; the run "
            "restarts from its checkpoint"));
      }
      if (rank == 0) {  // where a membership change's time goes (docs/train.md)
        std::fprintf(stderr,
                     "[train] generation %lld: regrouped in %lld ms (declared by the driver after "
                     "%lld ms, both groups joined after %lld ms)\n",
                     static_cast<long long>(joined), static_cast<long long>(MsSince(entered)),
                     static_cast<long long>(declared_ms), static_cast<long long>(joined_ms));
      }
      return;
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

// Rank 0's step count and synchronisation points, to a replacement (every member takes part);
// and which ranks receive the state (StateReceivers).
void ShareProgress() {
  const Context& ctx = context;
  int64_t progress[2] = {elastic.steps, elastic.sync_points};
  coll::Broadcast(progress, 2, coll::DataType::kInt64, 0, ctx.host_group);
  const int64_t mine = elastic.needs_state ? 1 : 0;
  std::vector<int64_t> needs(ctx.world_size);
  coll::AllGather(&mine, needs.data(), 1, coll::DataType::kInt64, ctx.host_group);
  elastic.receivers.clear();
  for (int rank = 0; rank < ctx.world_size; ++rank) {
    if (needs[rank] != 0) elastic.receivers.push_back(rank);
  }
  if (elastic.progress_known) return;
  std::lock_guard<std::mutex> lock(mu);
  elastic.steps = progress[0];
  elastic.sync_points = progress[1];
  elastic.last = StepOutcome();
  elastic.last.step = elastic.steps;
  elastic.last.generation = context.generation;
  elastic.last.world_size = context.world_size;
  elastic.progress_known = true;
}

// The state transfer's calls (state_transfer.h) on this worker: `receiving` on a replacement.
// `receive_model`: the replacement's model receiver before EnableReplacements registered
// model_share (nullptr: model_share).
TransferCalls TransferCallsOf(bool receiving, std::function<void()> receive_model = nullptr) {
  TransferCalls calls;
  calls.run = [receiving, receive_model](TransferPart part) {
    const auto start = std::chrono::steady_clock::now();
    switch (part) {
      case TransferPart::kProgress:
        ShareProgress();
        break;
      case TransferPart::kModel:
        if (receive_model) {
          receive_model();
        } else if (model_share) {
          model_share(receiving);
        }
        break;
      case TransferPart::kLoopState:
        if (loop_share) loop_share(receiving);
        break;
    }
    elastic.part_ms[static_cast<int>(part)] = MsSince(start);
  };
  calls.recover = [](const coll::CollectiveError& e) { return RecoverFromPeerFailure(e); };
  calls.complete = [receiving] {
    CompleteSyncPoint();
    if (receiving) elastic.needs_state = false;
    const Context& ctx = context;
    if (receiving || ctx.world_rank != 0) return;
    std::string to;
    for (int rank : elastic.receivers) absl::StrAppend(&to, to.empty() ? "" : ",", rank);
    std::fprintf(stderr,
                 "[train] generation %lld: state to rank(s) %s in %lld ms (step count %lld ms, "
                 "model %lld ms, loop state %lld ms)\n",
                 static_cast<long long>(ctx.generation), to.empty() ? "none" : to.c_str(),
                 static_cast<long long>(elastic.part_ms[0] + elastic.part_ms[1] +
                                        elastic.part_ms[2]),
                 static_cast<long long>(elastic.part_ms[0]),
                 static_cast<long long>(elastic.part_ms[1]),
                 static_cast<long long>(elastic.part_ms[2]));
  };
  return calls;
}

}  // namespace

bool RecoverFromPeerFailure(const coll::CollectiveError& error) {
  if (dynamic_cast<const coll::ExcludedError*>(&error) != nullptr) return false;
  Context& ctx = context;  // written by this thread only (see ElasticState)
  if (!ctx.elastic || error.rank() < 0) return false;
  ::troupe::internal::Runtime* runtime = ::troupe::internal::CurrentRuntime();
  if (runtime == nullptr) return false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (elastic.failure_ms == 0) elastic.failure_ms = UnixMs();
  }
  Regroup(*runtime, ctx.generation, error.rank(), error.what());
  return true;
}

bool ReplacementsAllowed() { return context.elastic && elastic.max_workers > 0; }
std::vector<int> StateReceivers() { return elastic.receivers; }
bool IsJoining() { return elastic.joining; }

void SetModelShare(std::function<void(bool receiving)> share) { model_share = std::move(share); }

bool SetLoopShare(std::function<void(bool receiving)> share) {
  loop_share = std::move(share);
  const bool receive = elastic.awaiting_loop_state;
  elastic.awaiting_loop_state = false;
  return receive;
}

void JoinAsReplacement(const std::function<void()>& receive_model) {
  Context& ctx = context;
  ::troupe::internal::Runtime* runtime = ::troupe::internal::CurrentRuntime();
  if (!elastic.joining || runtime == nullptr) return;
  const std::string ns = runtime->JobNamespace();
  // Announce, then wait (as long as it takes: the members join it at a step boundary of theirs;
  // the driver ends this worker with the run) for the generation that adds this worker.
  runtime->KvPut(ns, ReadyKey(ctx.group, elastic.worker), std::to_string(UnixMs()),
                 /*overwrite=*/true);
  int64_t target = 0;
  while (true) {
    if (auto text = runtime->KvGet(ns, JoinedKey(ctx.group, elastic.worker))) {
      if (absl::SimpleAtoi(*text, &target) && target > 0) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Regroup(*runtime, target - 1, -1, "");
  // The step count and the model; a member failing meanwhile: both again, as the members redo
  // the whole transfer (state_transfer.h).
  ReceiveFirstPartsAsReplacement(TransferCallsOf(/*receiving=*/true, receive_model));
  elastic.awaiting_loop_state = true;
  elastic.skip_boundary = true;
}

// The members' side of a join, between two steps (ElasticSampler::Next): whether replacements
// wait (rank 0 reads the driver's proposal; one all-reduce makes every member agree), and if so
// the next generation, with them, and the state they need.
void AtStepBoundary() {
  Context& ctx = context;
  if (!ctx.elastic || elastic.max_workers <= 0 || !loop_share) return;
  if (elastic.skip_boundary) {  // a replacement, at the boundary it joined at
    elastic.skip_boundary = false;
    return;
  }
  ::troupe::internal::Runtime* runtime = ::troupe::internal::CurrentRuntime();
  if (runtime == nullptr) return;
  const std::string ns = runtime->JobNamespace();
  int64_t proposed = 0;
  while (true) {
    if (ctx.world_size >= elastic.max_workers) return;
    proposed = ctx.world_rank == 0 && runtime->KvGet(ns, JoinKey(ctx.group, ctx.generation));
    try {
      if (ctx.world_size > 1) {
        coll::AllReduce(&proposed, 1, coll::DataType::kInt64, coll::ReduceOp::kMax, ctx.host_group);
      }
      break;
    } catch (const coll::CollectiveError& e) {
      if (!RecoverFromPeerFailure(e)) throw;  // then ask again, in the new generation
    }
  }
  CompleteSyncPoint();
  if (!proposed) return;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (elastic.failure_ms == 0) elastic.failure_ms = UnixMs();  // the join is timed too
  }
  const int64_t at = ctx.generation;
  if (ctx.world_rank == 0) {
    runtime->KvPut(ns, BoundaryKey(ctx.group, at), std::to_string(elastic.steps),
                   /*overwrite=*/false);
  }
  Regroup(*runtime, at, -1, "");
  TransferAsMember(TransferCallsOf(/*receiving=*/false));
}

void ReceiveLoopState() { ReceiveLoopStateAsReplacement(TransferCallsOf(/*receiving=*/true)); }

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
