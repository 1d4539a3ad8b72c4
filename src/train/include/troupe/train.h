// Data-parallel training across worker actors, shaped like Ray Train:
//
//   void TrainLoop(const troupe::train::LoopConfig& config) {
//     const auto& ctx = troupe::train::GetContext();        // world_rank, world_size, ...
//     ... train on this rank's shard, all-reducing gradients (troupe/train_torch.h) ...
//     troupe::train::Report({{"epoch", e}, {"loss", l}}, checkpoint_dir);
//   }
//   TROUPE_TRAIN_LOOP(TrainLoop);
//
//   troupe::train::DataParallelTrainer trainer(TrainLoop, {{"lr", "0.001"}},
//       troupe::train::ScalingConfig{.num_workers = 2},
//       troupe::train::RunConfig{.name = "fashion", .storage_path = "/tmp/results"});
//   troupe::train::Result result = trainer.Fit();
//
// Fit reserves a placement group (one bundle per worker), starts a worker actor in each bundle,
// orders ranks by node then GPU, forms a collective group (NCCL with whole GPUs per worker, CPU
// otherwise: ScalingConfig::collective_backend) plus a CPU side group for host memory, and runs
// the loop on every worker. Reports come back in order; checkpoints are copied to the driver's
// storage_path; when a worker or its node dies, every worker restarts from the latest checkpoint,
// up to FailureConfig::max_failures times — or, with ScalingConfig::min_workers below
// num_workers (elastic training), the survivors go on without it from the step it failed in, as
// the next generation of the workers' groups, and restart from the checkpoint only below
// min_workers. The driver publishes each run's progress (placement, reports, checkpoints,
// membership changes) into the GCS KV for the dashboard (src/train/run_record.h). See
// docs/train.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace troupe::train {

class CheckpointStore;  // src/train/checkpoints.h
struct RunRecord;       // src/train/run_record.h

using LoopConfig = std::map<std::string, std::string>;
using Metrics = std::map<std::string, double>;
using TrainLoopFn = void (*)(const LoopConfig& config);

struct ScalingConfig {
  int num_workers = 1;
  bool use_gpu = false;  // GPUs for the workers (one each unless resources_per_worker says)
  // Per worker; default {CPU: 1} (+ {GPU: 1} with use_gpu). {GPU: 0.5} puts two workers on
  // one card (they then all-reduce over the CPU backend: see collective_backend).
  std::map<std::string, double> resources_per_worker;
  std::string placement_strategy = "PACK";  // PACK, SPREAD, STRICT_PACK, STRICT_SPREAD
  // The workers' collective group: "auto" (NCCL when use_gpu and every worker has whole GPUs
  // of its own, else the CPU backend), "cpu" (CUDA tensors are staged through pinned host
  // memory; e.g. across hosts without a network NCCL can use) or "nccl".
  std::string collective_backend = "auto";
  // Elastic training (docs/train.md, "Elastic training"): with min_workers below num_workers, a
  // worker that dies, hangs or is cut off is dropped and the others redo the step it failed in
  // without it (no restart, no checkpoint read), down to min_workers; below that every worker
  // restarts from the latest checkpoint as without it. 0: num_workers (no elastic path).
  int min_workers = 0;
  // Replacements (docs/train.md, "Replacements"): the most workers an elastic run may hold. While
  // it has fewer (after a loss, or above num_workers from the start) the driver starts a
  // replacement worker whenever the cluster has room for one; it joins at the others' next step
  // boundary and receives the model, optimizer and sampler state from a live peer (the loop
  // calls DistributedModel::EnableReplacements). 0: no replacements (a run only shrinks);
  // otherwise at least num_workers. Setting it makes the run elastic even with min_workers 0.
  int max_workers = 0;
};

struct CheckpointConfig {
  int num_to_keep = 0;              // 0: keep every checkpoint
  std::string score_attribute;      // metric ranking checkpoints ("" : the newest are best)
  std::string score_order = "max";  // or "min"
};

struct FailureConfig {
  int max_failures = 0;  // restarts allowed after a worker failure; -1: forever
  // Elastic runs: the deadline of every collective operation of the workers (a member that
  // makes no progress for this long is reported failed), and how long survivors wait for the
  // next generation after reporting a failure before they give up (then the run restarts from
  // the checkpoint).
  std::chrono::milliseconds step_timeout = std::chrono::seconds(30);
  // Elastic runs: a worker whose process sends nothing for this long (SIGSTOPped, frozen, its
  // link cut) while its peers wait for it is reported hung and dropped like a dead one
  // (collective::GroupOptions::hang_timeout of the workers' groups). 0: off (only step_timeout
  // catches it); otherwise at least 200 ms.
  std::chrono::milliseconds hang_timeout = std::chrono::milliseconds(1500);
};

struct RunConfig {
  std::string name = "train";
  std::string storage_path = "~/troupe_results";  // on the driver's machine
  CheckpointConfig checkpoint_config;
  FailureConfig failure_config;
  bool verbose = true;  // print a progress line per report
};

struct Checkpoint {
  std::string path;  // directory under storage_path/name
  Metrics metrics;   // reported with it
};

// A change of an elastic run's membership, or a restart (RunRecord and Result keep them all).
struct MembershipEvent {
  int64_t generation = 0;  // the generation the change made (0 for a restart)
  std::string change;      // "left" (survivors went on), or "restart" (from the checkpoint)
  std::string why;         // "died", "hung", "failed" (as its peers reported it), or the reason
                           // of a restart
  std::vector<int> ranks;  // the ranks, in the previous generation, that left
  int world_size = 0;      // workers after the change
  int64_t step = -1;       // steps committed before it (it hit step `step + 1`); -1: unknown
  int64_t time_ms = 0;     // when the failure was first noticed (unix ms)
  double recovery_s = -1;  // from then to the next committed step; -1: not (yet) known
  std::string detail;      // the failure, as reported
};

struct Result {
  Metrics metrics;                       // the last report
  std::vector<Metrics> metrics_history;  // every report, in order
  std::optional<Checkpoint> best_checkpoint;
  std::optional<Checkpoint> latest_checkpoint;
  std::string error;  // empty when training finished
  int restarts = 0;   // worker-group restarts after failures
  std::vector<MembershipEvent> membership_events;  // in order
};

class DataParallelTrainer {
 public:
  // `loop` must be registered with TROUPE_TRAIN_LOOP in the executable.
  DataParallelTrainer(TrainLoopFn loop, LoopConfig config, ScalingConfig scaling,
                      RunConfig run = {});
  // Runs training to the end (or to a failure beyond max_failures, reported in Result::error).
  // Needs troupe::Init() first. Throws TroupeError for bad configurations.
  Result Fit();

 private:
  // One placement of the workers, run until done or a failure (returned; "" when done).
  std::string RunAttempt(int attempt, const std::map<std::string, double>& bundle, int strategy,
                         int cpus, const std::string& loop_name, CheckpointStore& checkpoints,
                         RunRecord& record, Result& result);
  void Log(const std::string& line) const;
  int MinWorkers() const;  // ScalingConfig::min_workers, 0 read as num_workers
  bool Elastic() const;    // min_workers below num_workers

  TrainLoopFn loop_;
  LoopConfig config_;
  ScalingConfig scaling_;
  RunConfig run_;
};

// Inside the train loop.
struct Context {
  int world_rank = 0;
  int local_rank = 0;  // among the workers on this node
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;
  int cpus = 1;            // CPUs reserved for this worker (intra-op threads are set to it)
  std::string group;       // the collective group of the workers (troupe/collective.h), of
                           // collective_backend (NCCL takes device memory only)
  std::string host_group;  // the same workers in a CPU-backend group, whatever `group` is: for
                           // host memory (metrics, barriers); SumAcrossWorkers and Report use it
  std::string experiment;  // RunConfig::name
  std::vector<int> gpu_ids;
  std::string collective_backend = "cpu";  // the group's backend: "cpu" or "nccl"
  // Elastic runs (ScalingConfig::min_workers): whether this is one, and the generation of the
  // workers' groups. world_rank, world_size, generation, local_rank, local_world_size and
  // node_rank change when members leave (inside SynchronizeGradients, SumAcrossWorkers or
  // Report) or replacements join (at a step boundary): they describe the current generation
  // (node_rank numbers the nodes that hold members, in rank order, with no gaps; local_rank
  // counts, in rank order, the members on this worker's node).
  bool elastic = false;
  int64_t generation = 0;
  // A replacement worker, started after the others to join the running group (see
  // ScalingConfig::max_workers): its world_rank, world_size, local_rank, local_world_size and
  // node_rank are known once it joined (in PrepareModel).
  bool replacement = false;
};
// The worker's context; the reference stays valid and its fields follow membership changes.
const Context& GetContext();

// How the last step (DistributedModel::SynchronizeGradients) ended, for samplers that account
// for every sample (ElasticSampler).
struct StepOutcome {
  int64_t step = 0;        // steps this worker has committed, the last one included
  int64_t generation = 0;  // the generation the step started in
  int world_size = 1;      // its world size then
  // Ranks, of the generation the step started in, that left during it: their share of the
  // step's batch was not trained on (the survivors redid the step without them).
  std::vector<int> lost_ranks;
};
StepOutcome LastStepOutcome();

// Reports metrics (and optionally a checkpoint directory) from every rank; a synchronisation
// point like a collective. Rank 0's report is what the driver records; its checkpoint directory
// is copied to the driver's storage_path. The directory is the loop's: it is packed before Report
// returns, so the loop may then remove or reuse it (Troupe never removes it).
void Report(const Metrics& metrics, const std::string& checkpoint_dir = "");

// The checkpoint to resume from (a local directory), if training restarted after a failure or
// resumed; nullopt on a fresh start. The directory (under the worker's temporary directory,
// $TMPDIR or /tmp) is Troupe's: it is removed when the loop ends, however it ends.
std::optional<std::string> GetCheckpoint();

namespace internal {
bool RegisterTrainLoop(const char* name, TrainLoopFn loop);
// Between two steps (ElasticSampler::Next calls it): where replacements join an elastic run.
// Nothing unless the run takes replacements and the loop called EnableReplacements.
void AtStepBoundary();
}  // namespace internal

}  // namespace troupe::train

// Registers a train loop (namespace scope, in a .cc file of the executable).
#define TROUPE_TRAIN_LOOP(fn)                                                       \
  static const bool TROUPE_TRAIN_INTERNAL_CONCAT(troupe_train_loop_, __COUNTER__) = \
      ::troupe::train::internal::RegisterTrainLoop(#fn, fn)
#define TROUPE_TRAIN_INTERNAL_CONCAT2(a, b) a##b
#define TROUPE_TRAIN_INTERNAL_CONCAT(a, b) TROUPE_TRAIN_INTERNAL_CONCAT2(a, b)
