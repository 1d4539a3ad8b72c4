// LibTorch integration of the train library: data-parallel models whose gradients are averaged
// across the workers' collective group, overlapping communication with the backward pass.
//
//   auto model = std::make_shared<Net>();
//   auto ddp = troupe::train::torch::PrepareModel(model);   // broadcasts rank 0's parameters
//   for (...) {
//     optimizer.zero_grad();
//     loss.backward();              // full buckets start all-reducing while backward goes on
//     ddp->SynchronizeGradients();  // waits for them; .grad now holds the average
//     optimizer.step();
//   }
//
// Gradients are grouped into ~25 MB buckets in reverse parameter order (the order backward
// produces them); a bucket is all-reduced (average) as soon as its last gradient arrives,
// asynchronously on the group's thread. CPU tensors go through the CPU backend, CUDA tensors
// through NCCL. One backward per SynchronizeGradients (no gradient accumulation across
// backwards). Parameters must be float32. Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "troupe/collective.h"

namespace troupe::train::torch {

struct DistributedOptions {
  int64_t bucket_bytes = 25 << 20;
  bool broadcast_buffers = true;  // rank 0's buffers (e.g. BatchNorm statistics) after each sync
};

class DistributedModel : public std::enable_shared_from_this<DistributedModel> {
 public:
  DistributedModel(std::shared_ptr<::torch::nn::Module> module, DistributedOptions options);
  ~DistributedModel();

  // Call after backward(): finishes the all-reduces and writes the averaged gradients to .grad.
  void SynchronizeGradients();
  ::torch::nn::Module& module() { return *module_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Bucket {
    ::torch::Tensor flat;
    std::vector<std::pair<::torch::Tensor, int64_t>> params;  // parameter, offset in flat
    int arrived = 0;
    bool launched = false;
    collective::Work work;
  };
  friend std::shared_ptr<DistributedModel> PrepareModel(std::shared_ptr<::torch::nn::Module>,
                                                        DistributedOptions);
  void RegisterHooks();
  void OnGradient(size_t bucket, size_t index, const ::torch::Tensor& grad);
  void LaunchReadyBuckets(bool all);
  void BroadcastBuffers();

  std::shared_ptr<::torch::nn::Module> module_;
  DistributedOptions options_;
  std::string group_;
  int world_size_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
};

// Broadcasts rank 0's parameters and buffers, sets intra-op threads to the worker's CPUs, and
// (with more than one worker) hooks gradient all-reduce into backward.
std::shared_ptr<DistributedModel> PrepareModel(std::shared_ptr<::torch::nn::Module> module,
                                               DistributedOptions options = {});

// All-reduces (sum) a few scalars across the workers, e.g. correct counts for accuracy.
std::vector<double> SumAcrossWorkers(std::vector<double> values);

}  // namespace troupe::train::torch
