// The state transfer to a replacement (issue 33) on fakes: a member failing during it makes the
// members and the replacement regroup; in the next generation they must all run the same parts
// in the same order (collectives are matched by their order in a generation), and each counts
// the transfer once.
#include "src/train/state_transfer.h"

#include <map>
#include <stdexcept>
#include <vector>

#include "gtest/gtest.h"

namespace troupe::train::internal {
namespace {

using Parts = std::vector<TransferPart>;
constexpr TransferPart P = TransferPart::kProgress, M = TransferPart::kModel,
                       L = TransferPart::kLoopState;

// One side of the transfer (a member or the replacement) on a fake group: it logs the parts it
// runs in each generation; in a generation listed in `fails`, that part throws as a member's
// death makes a collective throw (naming rank 3). Recovering moves to the next generation.
struct FakeSide {
  std::map<int, TransferPart> fails;  // generation -> the part that fails in it
  int generation = 1;
  std::map<int, Parts> ran;  // by generation
  int completed = 0;

  TransferCalls Calls() {
    TransferCalls calls;
    calls.run = [this](TransferPart part) {
      ran[generation].push_back(part);
      auto it = fails.find(generation);
      if (it != fails.end() && it->second == part) {
        throw collective::CollectiveError("rank 3 is gone: its connection closed", "g", "broadcast",
                                          3);
      }
    };
    calls.recover = [this](const collective::CollectiveError& e) {
      if (e.rank() < 0) return false;
      ++generation;
      return true;
    };
    calls.complete = [this] { ++completed; };
    return calls;
  }
};

// The members' side: the whole transfer at their step boundary.
void RunMember(FakeSide& side) { TransferAsMember(side.Calls()); }
// The replacement's side: the first parts as it joins (PrepareModel), the loop's state later
// (EnableReplacements), with its own code in between.
void RunReplacement(FakeSide& side) {
  ReceiveFirstPartsAsReplacement(side.Calls());
  ReceiveLoopStateAsReplacement(side.Calls());
}

TEST(StateTransferTest, WithoutFailuresEverySideRunsEachPartOnceAndCountsTheTransfer) {
  FakeSide member, replacement;
  RunMember(member);
  RunReplacement(replacement);
  EXPECT_EQ(member.ran, (std::map<int, Parts>{{1, {P, M, L}}}));
  EXPECT_EQ(replacement.ran, member.ran);
  EXPECT_EQ(member.completed, 1);
  EXPECT_EQ(replacement.completed, 1);
}

// The case of the last report: the replacement used to receive the model again on its own while
// the members resent the step count first (and then the loop's state alone while they resent
// everything): different collectives in the same generation.
TEST(StateTransferTest, AFailureDuringTheModelMakesEverySideRedoTheWholeTransfer) {
  FakeSide member{{{1, M}}}, replacement{{{1, M}}};
  RunMember(member);
  RunReplacement(replacement);
  EXPECT_EQ(member.ran.at(2), (Parts{P, M, L}));
  EXPECT_EQ(replacement.ran.at(2), member.ran.at(2)) << "the same collectives, in the same order";
  EXPECT_EQ(member.completed, 1);
  EXPECT_EQ(replacement.completed, 1);
}

TEST(StateTransferTest, AFailureDuringTheLoopStateMakesEverySideRedoTheWholeTransfer) {
  // The replacement received the step count and the model in generation 1; its loop's state
  // part, later, fails like the members' did.
  FakeSide member{{{1, L}}}, replacement{{{1, L}}};
  RunMember(member);
  RunReplacement(replacement);
  EXPECT_EQ(replacement.ran.at(1), (Parts{P, M, L}));
  EXPECT_EQ(member.ran.at(2), (Parts{P, M, L}));
  EXPECT_EQ(replacement.ran.at(2), member.ran.at(2));
  EXPECT_EQ(replacement.completed, 1);
}

TEST(StateTransferTest, AFailureDuringTheStepCountToo) {
  FakeSide member{{{1, P}}}, replacement{{{1, P}}};
  RunMember(member);
  RunReplacement(replacement);
  EXPECT_EQ(member.ran.at(2), (Parts{P, M, L}));
  EXPECT_EQ(replacement.ran.at(2), member.ran.at(2));
}

// A second member lost while the transfer is redone: a third generation, the whole transfer once
// more on every side.
TEST(StateTransferTest, TwoFailuresInARowRedoTheWholeTransferEachTime) {
  FakeSide member{{{1, M}, {2, L}}}, replacement{{{1, M}, {2, L}}};
  RunMember(member);
  RunReplacement(replacement);
  EXPECT_EQ(member.generation, 3);
  EXPECT_EQ(replacement.generation, 3);
  EXPECT_EQ(replacement.ran.at(2), member.ran.at(2));
  EXPECT_EQ(member.ran.at(3), (Parts{P, M, L}));
  EXPECT_EQ(replacement.ran.at(3), member.ran.at(3));
  EXPECT_EQ(member.completed, 1);
  EXPECT_EQ(replacement.completed, 1);
}

// An error recovery refuses (this member's own, rank -1; or it was excluded) is rethrown, and
// the transfer does not count as done.
TEST(StateTransferTest, AnUnrecoverableErrorIsRethrownAndTheTransferNotCounted) {
  FakeSide member;
  TransferCalls calls = member.Calls();
  calls.run = [](TransferPart part) {
    if (part == TransferPart::kModel) {
      throw collective::CollectiveError("this member's own failure", "g", "broadcast", -1);
    }
  };
  EXPECT_THROW(TransferAsMember(calls), collective::CollectiveError);
  EXPECT_EQ(member.completed, 0);
  calls.run = [](TransferPart) { throw std::runtime_error("not a collective error"); };
  EXPECT_THROW(ReceiveLoopStateAsReplacement(calls), std::runtime_error);
  EXPECT_EQ(member.completed, 0);
}

}  // namespace
}  // namespace troupe::train::internal
