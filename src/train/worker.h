// The worker actor of DataParallelTrainer: one per bundle; runs the registered train loop with a
// Context, and hands rank 0's reports (metrics + packed checkpoint) to the driver, which polls
// them while the loop runs (the actor has two executor threads). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "troupe/collective.h"
#include "troupe/train.h"

namespace troupe::train::internal {

// One report as it travels to the driver: metrics and the checkpoint package ("" for none).
using WireReport = std::pair<Metrics, std::string>;

class TrainWorker {
 public:
  static TrainWorker* Create();

  // {node id hex, leased GPU ids "a,b"}: where this worker runs, to order ranks.
  std::vector<std::string> Where();
  // Runs the loop to its end. `ranks`: world_rank, local_rank, world_size, local_world_size,
  // node_rank, cpus, 1 when the group is NCCL (0: CPU), then for elastic runs 1, the step
  // timeout in ms, the groups' generation, 1 for a replacement (it joins a running group: its
  // rank and world size come with the generation that adds it), this worker's number on the
  // driver, and max_workers (0: no replacements). `checkpoint`: a package to resume from (""
  // for a fresh start). Returns false when the worker was excluded from the group (fenced) and
  // stopped: it contributed nothing after that. In elastic runs a CollectiveError naming a
  // failed peer that ends the loop is rethrown with ElasticCollectiveFailure's message.
  bool Run(std::string loop_name, LoopConfig config, std::vector<int64_t> ranks, std::string group,
           std::string experiment, std::string checkpoint);
  // Rank 0's reports since the last poll, in order.
  std::vector<WireReport> PollReports();
};

// The message of a CollectiveError naming a failed peer (rank() >= 0) that ended an elastic
// run's loop: `error`'s, then that a collective which does not regroup (the loop's own on the
// workers' groups) ended the loop, that the run restarts from its checkpoint, and what to use.
std::string ElasticCollectiveFailure(const collective::CollectiveError& error);

// The CPU-backend side group of the workers of collective group `group` (Context::host_group).
inline std::string HostGroupName(const std::string& group) { return group + ".cpu"; }

// Worker-process state the free functions (GetContext, Report, GetCheckpoint) read.
void QueueReport(WireReport report);

// The name `loop` was registered under with TROUPE_TRAIN_LOOP ("" if it was not).
std::string TrainLoopName(TrainLoopFn loop);

// Elastic runs, in the worker (Context::elastic; docs/train.md, "Elastic training"). The
// operations that survive a member's failure — SynchronizeGradients, SumAcrossWorkers, Report —
// call these around their collectives, on the loop's thread. Every member counts the
// synchronisation points it completed, so that after a failure the survivors can check that
// they all stand at the same one before redoing it.

// SynchronizeGradients begins: the step's generation and world size are noted.
void BeginStep();
// The step committed (a synchronisation point): LastStepOutcome() describes it.
void CommitStep();
// Another synchronisation point completed (SumAcrossWorkers, Report).
void CompleteSyncPoint();
// After `error` from an operation on the workers' groups. Returns false when it cannot be
// recovered here — not an elastic run, an error of this member's own (rank -1), or ExcludedError
// — and the caller rethrows it. Otherwise: reports the failed member to the driver, waits (up to
// FailureConfig::step_timeout) for the generation that leaves it out, joins it (both groups),
// updates the Context, checks that every survivor stands at the same synchronisation point, and
// returns true: the caller redoes its operation on the new generation. Throws ExcludedError when
// this member was left out, TroupeError when recovery is impossible (the driver then restarts the
// run from the checkpoint).
bool RecoverFromPeerFailure(const collective::CollectiveError& error);

// Replacements (ScalingConfig::max_workers; docs/train.md, "Replacements"), on the loop's thread.
// A replacement joins at the members' step boundary (AtStepBoundary, in troupe/train.h) and then
// receives, in this order, from rank 0: the step count (by broadcast), the model (whatever
// SetModelShare registered: PrepareModel) and the loop's state (SetLoopShare:
// DistributedModel::EnableReplacements). Every member runs the same calls, sending or receiving;
// after a member's failure during it, every side runs the whole transfer again, and once over it
// is a synchronisation point (src/train/state_transfer.h).

// Whether this elastic run may take replacements (the group can grow).
bool ReplacementsAllowed();
// Whether this worker is a replacement that has not joined yet.
bool IsJoining();
// The ranks (of the current generation) that receive the state in the transfer under way: the
// replacements whose transfer has not completed. Known on every member once the transfer's
// first part (the step count) ran; the others hold rank 0's state already, so the model and the
// loop's state travel to these ranks only.
std::vector<int> StateReceivers();
// A replacement: announces itself, waits for the generation that adds it, joins it and receives
// the step count, then the model (`receive_model`: PrepareModel's broadcast). Throws like
// RecoverFromPeerFailure.
void JoinAsReplacement(const std::function<void()>& receive_model);
// A replacement that joined, once SetLoopShare returned true: receives the loop's state, which
// ends the transfer (after a member's failure: the whole transfer again, model_share's part too).
void ReceiveLoopState();
// Registers what each side runs to send (rank 0) or receive (receiving: a replacement) state;
// nullptr unregisters. Cleared when the loop ends. SetLoopShare returns true once on a
// replacement that joined and must receive the loop's state now.
void SetModelShare(std::function<void(bool receiving)> share);
bool SetLoopShare(std::function<void(bool receiving)> share);

}  // namespace troupe::train::internal
