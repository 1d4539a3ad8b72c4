// Data helpers for data-parallel training: which samples a rank trains on, in batches.
//
//   troupe::train::DistributedSampler sampler(dataset_size, ctx.world_rank, ctx.world_size);
//   for (auto& batch : troupe::train::Batches(sampler.Indices(epoch), 128)) { ... }
//
// Elastic runs (members may leave mid-epoch) take every sample exactly once per epoch with
// ElasticSampler:
//
//   troupe::train::ElasticSampler sampler(dataset_size, /*batch_size=*/128);
//   sampler.SetEpoch(epoch);
//   while (!sampler.Done()) {
//     std::vector<int64_t> batch = sampler.Next();  // this rank's share of the step
//     ... forward, backward ...
//     ddp->SynchronizeGradients();
//     sampler.Commit();  // shares of members lost in the step go back to the epoch
//   }
//
// Header-only; value types (not thread-safe).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "troupe/train.h"

namespace troupe::train {

// Like torch.utils.data.DistributedSampler: every epoch, one permutation of 0..size-1 (seeded by
// seed + epoch, so all ranks agree), padded by wrapping to a multiple of world_size, and rank r
// takes every world_size-th index starting at r. Each rank gets the same number of samples.
class DistributedSampler {
 public:
  DistributedSampler(int64_t size, int rank, int world_size, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false)
      : size_(size),
        rank_(rank),
        world_(world_size),
        shuffle_(shuffle),
        seed_(seed),
        drop_last_(drop_last) {}

  std::vector<int64_t> Indices(int64_t epoch) const {
    std::vector<int64_t> all(size_);
    std::iota(all.begin(), all.end(), 0);
    if (shuffle_) {
      std::mt19937_64 random(seed_ + static_cast<uint64_t>(epoch));
      std::shuffle(all.begin(), all.end(), random);
    }
    const int64_t per_rank = drop_last_ ? size_ / world_ : (size_ + world_ - 1) / world_;
    std::vector<int64_t> mine;
    mine.reserve(per_rank);
    for (int64_t i = 0; i < per_rank; ++i) {
      const int64_t position = i * world_ + rank_;
      if (size_ > 0) mine.push_back(all[position % size_]);  // wraps to pad the last round
    }
    return mine;
  }
  int64_t num_samples() const {
    return drop_last_ ? size_ / world_ : (size_ + world_ - 1) / world_;
  }

 private:
  int64_t size_;
  int rank_, world_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
};

// One permutation per epoch (seeded by seed + epoch, so every member agrees) consumed by a global
// cursor that only committed steps advance. A step's global batch is the next world_size *
// batch_size samples of the epoch — those given back by lost members first, then the
// permutation's — cut into world_size consecutive slices (as even as possible: the last step of
// an epoch may give some ranks fewer samples, or none); rank r trains on slice r. When members
// leave during a step, their slices go back to the epoch (every survivor computes this alike
// from the step's membership: no communication) and are trained on in later steps, spread over
// the survivors. So within an epoch every sample is committed exactly once, whatever the changes.
class ElasticSampler {
 public:
  ElasticSampler(int64_t size, int64_t batch_size, bool shuffle = true, uint64_t seed = 0)
      : size_(size), batch_size_(batch_size), shuffle_(shuffle), seed_(seed) {
    if (size < 0 || batch_size < 1) {
      throw std::invalid_argument("ElasticSampler: size must be >= 0 and batch_size >= 1");
    }
    SetEpoch(0);
  }

  // Starts epoch `epoch` afresh: its permutation, nothing taken yet. On a sampler that received
  // its peers' state mid-epoch (a replacement: Restore), the first call naming that epoch keeps
  // the state instead, so a loop written `for (epoch = sampler.epoch(); ...) SetEpoch(epoch)`
  // goes on where its peers are.
  void SetEpoch(int64_t epoch) {
    if (restored_ && epoch == epoch_) {
      restored_ = false;
      return;
    }
    restored_ = false;
    epoch_ = epoch;
    steps_ = 0;
    order_.resize(size_);
    std::iota(order_.begin(), order_.end(), 0);
    if (shuffle_) {
      std::mt19937_64 random(seed_ + static_cast<uint64_t>(epoch));
      std::shuffle(order_.begin(), order_.end(), random);
    }
    cursor_ = 0;
    returned_.clear();
    step_.clear();
    last_committed_.clear();
    in_step_ = false;
    committed_ = 0;
  }

  // Whether every sample of the epoch has been committed (the same answer on every member).
  bool Done() const { return !in_step_ && returned_.empty() && cursor_ == order_.size(); }

  // Rank `rank`'s slice of the next step's global batch, for a membership of `world_size`.
  // (Replacements join only through Next().)
  std::vector<int64_t> Next(int rank, int world_size) {
    if (in_step_) {
      throw std::logic_error("ElasticSampler::Next: the previous step was not committed");
    }
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      throw std::invalid_argument("ElasticSampler::Next: rank " + std::to_string(rank) +
                                  " is outside [0, " + std::to_string(world_size) + ")");
    }
    const size_t want = static_cast<size_t>(batch_size_) * world_size;
    step_.clear();
    const size_t from_returned = std::min(want, returned_.size());
    step_.assign(returned_.begin(), returned_.begin() + from_returned);
    returned_.erase(returned_.begin(), returned_.begin() + from_returned);
    const size_t from_order = std::min(want - step_.size(), order_.size() - cursor_);
    step_.insert(step_.end(), order_.begin() + cursor_, order_.begin() + cursor_ + from_order);
    cursor_ += from_order;
    step_world_ = world_size;
    in_step_ = true;
    return Slice(rank);
  }

  // The step committed; the slices of `lost_ranks` (ranks of the membership Next was given) go
  // back to the epoch, ahead of the samples not yet taken.
  void Commit(const std::vector<int>& lost_ranks) {
    if (!in_step_) throw std::logic_error("ElasticSampler::Commit: no step in progress");
    std::vector<int64_t> back;
    for (int rank = 0; rank < step_world_; ++rank) {
      if (std::find(lost_ranks.begin(), lost_ranks.end(), rank) == lost_ranks.end()) continue;
      const std::vector<int64_t> lost = Slice(rank);
      back.insert(back.end(), lost.begin(), lost.end());
    }
    committed_ += static_cast<int64_t>(step_.size() - back.size());
    last_committed_.clear();
    for (int rank = 0; rank < step_world_; ++rank) {
      if (std::find(lost_ranks.begin(), lost_ranks.end(), rank) != lost_ranks.end()) continue;
      const std::vector<int64_t> kept = Slice(rank);
      last_committed_.insert(last_committed_.end(), kept.begin(), kept.end());
    }
    returned_.insert(returned_.begin(), back.begin(), back.end());
    step_.clear();
    in_step_ = false;
    ++steps_;
  }

  // In the train loop: Next for this worker's rank and world size (GetContext()), and Commit with
  // the ranks the last SynchronizeGradients lost (LastStepOutcome()). In runs that take
  // replacements, Next() is the step boundary where they join (the world size grows there).
  std::vector<int64_t> Next() {
    internal::AtStepBoundary();
    const Context& ctx = GetContext();
    step_generation_ = ctx.generation;
    step_number_ = LastStepOutcome().step;
    return Next(ctx.world_rank, ctx.world_size);
  }
  void Commit() {
    const StepOutcome outcome = LastStepOutcome();
    if (outcome.step != step_number_ + 1 || outcome.generation != step_generation_ ||
        outcome.world_size != step_world_) {
      throw std::logic_error(
          "ElasticSampler::Commit: exactly one SynchronizeGradients must run between Next() and "
          "Commit() (or call Next(rank, world_size) and Commit(lost_ranks) yourself)");
    }
    Commit(outcome.lost_ranks);
  }

  int64_t committed() const { return committed_; }  // samples committed this epoch
  int64_t epoch() const { return epoch_; }          // the epoch SetEpoch (or Restore) set
  int64_t steps() const { return steps_; }          // steps committed this epoch

  // Where the epoch stands, between steps: what a replacement receives from a live peer.
  std::vector<int64_t> State() const {
    if (in_step_) throw std::logic_error("ElasticSampler::State: a step is in progress");
    std::vector<int64_t> state = {size_, epoch_, static_cast<int64_t>(cursor_), committed_, steps_};
    state.insert(state.end(), returned_.begin(), returned_.end());
    return state;
  }
  // Takes a peer's State() (same size, batch size, shuffle and seed); the next SetEpoch naming
  // its epoch keeps it.
  void Restore(const std::vector<int64_t>& state) {
    if (state.size() < 5 || state[0] != size_ || state[2] < 0 || state[2] > size_) {
      throw std::invalid_argument(
          "ElasticSampler::Restore: the state is not from a sampler over the same dataset size");
    }
    SetEpoch(state[1]);
    cursor_ = static_cast<size_t>(state[2]);
    committed_ = state[3];
    steps_ = state[4];
    returned_.assign(state.begin() + 5, state.end());
    restored_ = true;
  }
  // The samples the last Commit committed, every member's (the same on every survivor).
  const std::vector<int64_t>& last_committed() const { return last_committed_; }
  // Samples of the epoch not yet taken by a step.
  int64_t remaining() const {
    return static_cast<int64_t>(returned_.size() + (order_.size() - cursor_));
  }

 private:
  std::vector<int64_t> Slice(int rank) const {
    const size_t n = step_.size();
    const size_t begin = n * rank / step_world_, end = n * (rank + 1) / step_world_;
    return std::vector<int64_t>(step_.begin() + begin, step_.begin() + end);
  }

  int64_t size_, batch_size_;
  bool shuffle_;
  uint64_t seed_;
  std::vector<int64_t> order_;     // the epoch's permutation
  size_t cursor_ = 0;              // order_[cursor_..] not yet taken
  std::vector<int64_t> returned_;  // given back by lost members, taken first
  std::vector<int64_t> step_;      // the step in progress's global batch
  std::vector<int64_t> last_committed_;
  int step_world_ = 1;
  bool in_step_ = false;
  int64_t committed_ = 0;
  int64_t step_generation_ = 0, step_number_ = 0;
  int64_t epoch_ = 0, steps_ = 0;
  bool restored_ = false;  // Restore()d: the next SetEpoch(epoch_) keeps the state
};

// Splits `indices` into consecutive batches of `batch_size` (the last may be smaller, or dropped).
inline std::vector<std::vector<int64_t>> Batches(const std::vector<int64_t>& indices,
                                                 int64_t batch_size, bool drop_last = false) {
  std::vector<std::vector<int64_t>> out;
  for (size_t start = 0; start < indices.size(); start += batch_size) {
    const size_t end = std::min(indices.size(), start + static_cast<size_t>(batch_size));
    if (drop_last && end - start < static_cast<size_t>(batch_size)) break;
    out.emplace_back(indices.begin() + start, indices.begin() + end);
  }
  return out;
}

}  // namespace troupe::train
