// The state transfer of an elastic run to its replacement workers (ScalingConfig::max_workers;
// docs/train.md, "Replacements"), as a retry policy over injected calls.
//
// Once a replacement joined, rank 0 sends three parts, in this order: the step count (to every
// member, with which ranks receive the rest), the model and the loop's state (optimizer,
// sampler; to the receiving ranks). Every member runs the same calls, sending, receiving or
// taking no part. The members run all three at their step boundary; the replacement runs
// the first two when it joined (PrepareModel) and the last one later (EnableReplacements, once
// the loop built its optimizer and sampler).
//
// A member that fails during the transfer makes everyone regroup on the next generation. Then
// every side runs the transfer again from its first part, whichever part failed and whichever
// parts it had completed: members and replacement redo the same collectives in the same order
// (a side that retried only the part it failed in would run a different collective from the
// others: a mismatch, a hang until the step timeout). When the transfer is over it counts as one
// synchronisation point on every side, so a side that completed it before the failure reached
// it and one that did not see that they differ when they regroup (the run then restarts from
// its checkpoint, saying so) instead of running different collectives.
//
// Plain logic: the collectives, the regrouping and the synchronisation count are injected, so
// it runs on fakes in tests. Not thread-safe: the train loop's thread runs it.
#pragma once

#include <functional>

#include "troupe/collective.h"

namespace troupe::train::internal {

enum class TransferPart { kProgress = 0, kModel = 1, kLoopState = 2 };

struct TransferCalls {
  std::function<void(TransferPart part)> run;  // one part's collectives, sending or receiving
  // After `error` from a part: regroups on the next generation and returns true (the transfer
  // runs again), or returns false and the error is rethrown. May throw (recovery impossible).
  std::function<bool(const collective::CollectiveError& error)> recover;
  std::function<void()> complete;  // the transfer is over: a synchronisation point
};

// A member, at the step boundary where replacements join: the whole transfer (sending, or
// receiving nothing new: every member holds rank 0's state already).
void TransferAsMember(const TransferCalls& calls);
// A replacement that just joined: the step count and the model. After a failure: those again.
void ReceiveFirstPartsAsReplacement(const TransferCalls& calls);
// The same replacement, later: the loop's state, which ends the transfer. After a failure: the
// whole transfer again (the step count, the model, the loop's state), as the members redo it.
void ReceiveLoopStateAsReplacement(const TransferCalls& calls);

}  // namespace troupe::train::internal
