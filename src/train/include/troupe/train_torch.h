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
// produces them); a bucket is all-reduced (average) as soon as its last gradient is accumulated,
// asynchronously on the group's thread. After the first SynchronizeGradients each parameter's
// .grad shares the bucket's memory (as DDP's gradient_as_bucket_view): zero_grad() zeroes it in
// place, backward accumulates into it and the average lands in it, with no copy in or out. A
// .grad that was reset or replaced is copied in instead. Like DDP, what is averaged is .grad as
// accumulated (without zero_grad() between steps, the running sum). The workers' group decides
// the transport (ScalingConfig::collective_backend): an NCCL group all-reduces CUDA tensors on
// the GPU; a CPU group takes CPU tensors, and CUDA tensors too, staging them through pinned host
// memory (e.g. two 0.5-GPU workers sharing a card). CUDA collectives run after the work queued on
// the tensor's current stream. One backward per SynchronizeGradients (a bucket
// launches once each of its gradients has been accumulated once: no accumulation across
// backwards). Parameters must be float32. Not thread-safe.
//
// Elastic runs (ScalingConfig::min_workers): each bucket's local gradient is copied aside before
// its all-reduce starts (the all-reduce works in place, and a failed one leaves a mix behind). When
// a member fails mid-step, SynchronizeGradients regroups the survivors as the next generation
// (Context::world_rank / world_size / generation change), restores the local gradients and
// averages them again over the survivors: the step commits without the lost member's share, no
// step is lost. LastStepOutcome() (troupe/train.h) says which ranks' shares were lost.
//
// Replacements (ScalingConfig::max_workers): a replacement worker runs the same loop. Its
// PrepareModel waits until the others reach a step boundary (ElasticSampler::Next), joins the
// group with them and receives rank 0's parameters and buffers; EnableReplacements then receives
// the optimizer's state and the sampler's position, so the loop goes on in step with the others:
//
//   auto ddp = PrepareModel(model);
//   torch::optim::Adam optimizer(model->parameters());
//   troupe::train::ElasticSampler sampler(dataset_size, batch_size);
//   ddp->EnableReplacements(optimizer, sampler);   // a replacement receives their state here
//   for (int64_t epoch = sampler.epoch(); epoch < epochs; ++epoch) {
//     sampler.SetEpoch(epoch);                     // a replacement: keeps the received position
//     while (!sampler.Done()) { ... sampler.Next() ... SynchronizeGradients ... Commit() }
//   }
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "troupe/collective.h"

namespace troupe::train {
class ElasticSampler;  // troupe/train_data.h
}  // namespace troupe::train

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

  // Elastic runs that take replacements (ScalingConfig::max_workers): call once, on every
  // worker, before the first step. Replacements then join at the others' step boundaries
  // (ElasticSampler::Next) and receive `optimizer`'s state (through its save/load archives) and
  // `sampler`'s position from rank 0; on a replacement this call receives them. Both must
  // outlive the loop. Without this call no replacement joins (they wait). Elsewhere: nothing.
  void EnableReplacements(::torch::optim::Optimizer& optimizer, ElasticSampler& sampler);

 private:
  struct Bucket {
    ::torch::Tensor flat;
    ::torch::Tensor saved;  // elastic runs: the local gradient, as launched
    std::vector<std::pair<::torch::Tensor, int64_t>> params;  // parameter, offset in flat
    int arrived = 0;
    bool launched = false;
    collective::Work work;
  };
  friend std::shared_ptr<DistributedModel> PrepareModel(std::shared_ptr<::torch::nn::Module>,
                                                        DistributedOptions);
  void RegisterHooks();
  // Parameter i's range of the bucket: a view (Slot), or a tensor sharing its storage that can
  // serve as the parameter's .grad (SlotAlias).
  static ::torch::Tensor Slot(const Bucket& bucket, size_t i);
  static ::torch::Tensor SlotAlias(const Bucket& bucket, size_t i);
  // Parameter i of bucket b has its gradient in .grad (the accumulator's post hook).
  void OnGradient(size_t bucket, size_t index);
  void LaunchReadyBuckets(bool all);
  // Copies into the bucket each parameter's .grad that is not already there (zeros for none).
  void AdoptGradients(Bucket& bucket);
  void BroadcastBuffers();
  // Rank 0's parameters and every buffer, to every member (the run's start).
  void BroadcastModel();
  // The same, to the ranks receiving a join's state transfer only (internal::StateReceivers).
  void ShareModel();
  // Waits for the launched all-reduces and makes each .grad its bucket's slot.
  void FinishBuckets();
  // After a failure: waits out every launched all-reduce, whatever became of it.
  void DrainBuckets();
  // Elastic runs, after RecoverFromPeerFailure: the local gradients again, averaged over the
  // survivors (regrouping again if another member fails meanwhile).
  void RedoOnNewGeneration();

  std::shared_ptr<::torch::nn::Module> module_;
  DistributedOptions options_;
  std::string group_;
  int world_size_;
  bool distributed_ = false;  // more than one worker at the start: buckets and hooks
  bool elastic_ = false;
  std::vector<Bucket> buckets_;
  // The parameters' gradient accumulators (a parameter holds its own only weakly), which carry
  // the hooks.
  std::vector<std::shared_ptr<::torch::autograd::Node>> accumulators_;
  size_t next_launch_ = 0;
};

// Broadcasts rank 0's parameters and buffers, sets intra-op threads to the worker's CPUs, and
// (with more than one worker) hooks gradient all-reduce into backward.
std::shared_ptr<DistributedModel> PrepareModel(std::shared_ptr<::torch::nn::Module> module,
                                               DistributedOptions options = {});

// The device this worker trains on (call it in the train loop, then move the model and every
// batch there): its first leased GPU as a CUDA device when it has one (ScalingConfig::use_gpu),
// else the CPU. The CUDA device number follows the node's --gpu-visibility: with `all` (the
// default) the worker sees every GPU of the node and the leased index is the device number; with
// `assigned` it sees only its own, as device 0. Throws troupe::TroupeError when a GPU is leased
// but this LibTorch cannot use it (see CudaDevice).
::torch::Device WorkerDevice();

// CUDA device `index`, after checking that this LibTorch can use it. Throws troupe::TroupeError
// saying what is missing: "this LibTorch has no CUDA" (a CPU-only build such as Debian's
// libtorch: build against a CUDA LibTorch), no device visible, or `index` out of range.
::torch::Device CudaDevice(int index);

// Whether this LibTorch was built with CUDA (whether or not this machine has a GPU).
bool LibTorchHasCuda();

// All-reduces (sum) a few scalars across the workers, e.g. correct counts for accuracy. Host
// memory: goes through the workers' CPU side group (Context::host_group), never NCCL. In elastic
// runs a member's failure regroups the survivors and the sum is taken again over them.
std::vector<double> SumAcrossWorkers(std::vector<double> values);

}  // namespace troupe::train::torch
