#include "src/train/state_transfer.h"

namespace troupe::train::internal {
namespace {

// Runs the parts `from`..`through`; after a failure that `calls.recover` handles, the parts from
// the transfer's first one through `through` (the whole transfer, as far as this side takes part
// in it now). Completes the transfer when `through` is its last part.
void RunParts(TransferPart from, TransferPart through, const TransferCalls& calls) {
  while (true) {
    try {
      for (int part = static_cast<int>(from); part <= static_cast<int>(through); ++part) {
        calls.run(static_cast<TransferPart>(part));
      }
      break;
    } catch (const collective::CollectiveError& e) {
      if (!calls.recover(e)) throw;
      from = TransferPart::kProgress;
    }
  }
  if (through == TransferPart::kLoopState) calls.complete();
}

}  // namespace

void TransferAsMember(const TransferCalls& calls) {
  RunParts(TransferPart::kProgress, TransferPart::kLoopState, calls);
}

void ReceiveFirstPartsAsReplacement(const TransferCalls& calls) {
  RunParts(TransferPart::kProgress, TransferPart::kModel, calls);
}

void ReceiveLoopStateAsReplacement(const TransferCalls& calls) {
  RunParts(TransferPart::kLoopState, TransferPart::kLoopState, calls);
}

}  // namespace troupe::train::internal
