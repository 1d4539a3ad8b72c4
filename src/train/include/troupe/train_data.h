// Data helpers for data-parallel training: which samples a rank trains on, in batches.
//
//   troupe::train::DistributedSampler sampler(dataset_size, ctx.world_rank, ctx.world_size);
//   for (auto& batch : troupe::train::Batches(sampler.Indices(epoch), 128)) { ... }
//
// Header-only; value types.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

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
