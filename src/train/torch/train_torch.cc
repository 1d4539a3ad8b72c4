#include "troupe/train_torch.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "src/train/torch/optimizer_state.h"
#include "src/train/worker.h"
#include "troupe/actor.h"
#include "troupe/errors.h"
#include "troupe/train.h"
#include "troupe/train_data.h"

namespace troupe::train::torch {
namespace {

namespace coll = troupe::collective;

void CheckFloat(const ::torch::Tensor& t, const std::string& what) {
  if (t.scalar_type() != ::torch::kFloat32) {
    throw std::invalid_argument("PrepareModel: " + what + " is " +
                                std::string(c10::toString(t.scalar_type())) +
                                "; only float32 parameters are supported");
  }
}

// c10::Stream::native_handle() (the cudaStream_t) where this LibTorch has it (>= 2.1).
template <typename S>
auto NativeHandle(const S& stream, int) -> decltype(stream.native_handle()) {
  return stream.native_handle();
}
template <typename S>
void* NativeHandle(const S&, long) {
  return nullptr;  // older LibTorch: the default stream, which is what it uses unless told
}

// The collective call for `t`: for a CUDA tensor, the current stream of its device, so the
// collective (NCCL, or a CPU group's staging copies) runs after the work queued there.
coll::CallOptions CallFor(const ::torch::Tensor& t) {
  coll::CallOptions call;
  if (t.is_cuda()) {
    call.cuda_stream = NativeHandle(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device()), 0);
  }
  return call;
}

// Broadcasts tensors from rank 0 through one flat buffer; in host memory with `on_host` (for a
// CPU group, whatever device the tensors are on).
// `tensors` as one flat float32 buffer (in host memory with `on_host`), and back.
::torch::Tensor Flatten(const std::vector<::torch::Tensor>& tensors, bool on_host) {
  std::vector<::torch::Tensor> flat_parts;
  for (const auto& t : tensors) flat_parts.push_back(t.detach().reshape(-1).to(::torch::kFloat32));
  ::torch::Tensor flat = ::torch::cat(flat_parts);
  if (on_host) flat = flat.to(::torch::kCPU);
  return flat.contiguous();
}

void Unflatten(const ::torch::Tensor& flat, const std::vector<::torch::Tensor>& tensors) {
  ::torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()).to(t.scalar_type()));
    offset += t.numel();
  }
}

void BroadcastTensors(const std::vector<::torch::Tensor>& tensors, const std::string& group,
                      bool on_host = false) {
  if (tensors.empty()) return;
  ::torch::Tensor flat = Flatten(tensors, on_host);
  coll::Broadcast(flat.data_ptr<float>(), flat.numel(), coll::DataType::kFloat32, 0, group,
                  CallFor(flat));
  Unflatten(flat, tensors);
}

// Rank 0's tensors to `receivers` only, one after the other, through one flat buffer (in host
// memory with `on_host`); the other members hold equal ones already and take no part. A join's
// state transfer: a broadcast would make every member receive and copy what it has.
void SendTensorsTo(const std::vector<::torch::Tensor>& tensors, const std::string& group,
                   const std::vector<int>& receivers, bool on_host = false) {
  if (tensors.empty() || receivers.empty()) return;
  const int rank = coll::GetRank(group);
  if (rank == 0) {
    ::torch::Tensor flat = Flatten(tensors, on_host);
    for (int receiver : receivers) {
      coll::Send(flat.data_ptr<float>(), flat.numel(), coll::DataType::kFloat32, receiver, group,
                 CallFor(flat));
    }
    return;
  }
  if (std::find(receivers.begin(), receivers.end(), rank) == receivers.end()) return;
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  const ::torch::Device device = on_host ? ::torch::Device(::torch::kCPU) : tensors[0].device();
  ::torch::Tensor flat =
      ::torch::empty({total}, ::torch::TensorOptions().dtype(::torch::kFloat32).device(device));
  coll::Recv(flat.data_ptr<float>(), flat.numel(), coll::DataType::kFloat32, 0, group,
             CallFor(flat));
  Unflatten(flat, tensors);
}

// Broadcasts rank 0's `values` (their count, then them) to every member of `group`.
void BroadcastInts(std::vector<int64_t>* values, const std::string& group) {
  int64_t count = static_cast<int64_t>(values->size());
  coll::Broadcast(&count, 1, coll::DataType::kInt64, 0, group);
  values->resize(count);
  coll::Broadcast(values->data(), values->size(), coll::DataType::kInt64, 0, group);
}

}  // namespace

DistributedModel::DistributedModel(std::shared_ptr<::torch::nn::Module> module,
                                   DistributedOptions options)
    : module_(std::move(module)), options_(options) {
  const Context& ctx = GetContext();
  for (auto& p : module_->parameters()) CheckFloat(p, "a parameter");
  group_ = ctx.group;
  // A replacement joins the running group first (at the others' step boundary): then it knows
  // its rank and world size, and receives the step count and the model from rank 0.
  const bool replacement = internal::IsJoining();
  if (replacement) internal::JoinAsReplacement([this] { ShareModel(); });
  world_size_ = ctx.world_size;
  elastic_ = ctx.elastic;
  ::torch::set_num_threads(std::max(1, ctx.cpus));
  // A run that takes replacements may grow from one member: buckets and hooks all the same.
  distributed_ = world_size_ > 1 || internal::ReplacementsAllowed();
  if (!distributed_) return;  // nothing to average: no hooks, no overhead
  std::vector<::torch::Tensor> params;
  for (auto& p : module_->parameters()) params.push_back(p);
  if (!replacement) BroadcastModel();  // a replacement received it as it joined
  // Buckets in reverse parameter order: the order in which backward produces gradients.
  int64_t filled = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    if (!it->requires_grad()) continue;
    const int64_t bytes = it->numel() * 4;
    if (buckets_.empty() || (filled > 0 && filled + bytes > options_.bucket_bytes)) {
      buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().params.push_back({*it, filled / 4});
    filled += bytes;
  }
  for (Bucket& bucket : buckets_) {
    const auto& [last, offset] = bucket.params.back();
    bucket.flat = ::torch::zeros({offset + last.numel()}, last.options().requires_grad(false));
    if (elastic_) bucket.saved = ::torch::empty_like(bucket.flat);
  }
}

namespace {

// Runs after a parameter's AccumulateGrad node, i.e. once .grad holds this backward's gradient.
class AccumulatedHook : public ::torch::autograd::FunctionPostHook {
 public:
  AccumulatedHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  ::torch::autograd::variable_list operator()(
      const ::torch::autograd::variable_list& outputs,
      const ::torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

// Puts `param`'s current gradient into its bucket slot: nothing to do when .grad already is the
// slot (SynchronizeGradients made it so: zero_grad() zeroes it in place and backward accumulates
// into it); else (the first step, or .grad reset or replaced) a copy, or zeros without a .grad.
void LoadGradient(const ::torch::Tensor& param, ::torch::Tensor slot) {
  ::torch::NoGradGuard no_grad;
  const ::torch::Tensor& grad = param.grad();
  if (!grad.defined()) {
    slot.zero_();
  } else if (grad.data_ptr() != slot.data_ptr()) {
    slot.copy_(grad);
  }
}

}  // namespace

void DistributedModel::RegisterHooks() {
  std::weak_ptr<DistributedModel> self = weak_from_this();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t i = 0; i < buckets_[b].params.size(); ++i) {
      ::torch::Tensor param = buckets_[b].params[i].first;
      // The parameter holds its accumulator only weakly: keep it (and so the hook) alive.
      auto accumulator = ::torch::autograd::impl::grad_accumulator(param);
      // The hook outlives nothing: once the model wrapper is gone it does nothing.
      accumulator->add_post_hook(std::make_unique<AccumulatedHook>([self, b, i] {
        if (auto model = self.lock()) model->OnGradient(b, i);
      }));
      accumulators_.push_back(std::move(accumulator));
    }
  }
}

DistributedModel::~DistributedModel() {
  internal::SetModelShare(nullptr);
  // Outstanding all-reduces reference our buffers: let them finish.
  for (Bucket& bucket : buckets_) {
    if (bucket.launched) {
      try {
        bucket.work.Wait();
      } catch (const std::exception&) {
      }
    }
  }
}

::torch::Tensor DistributedModel::Slot(const Bucket& bucket, size_t i) {
  const auto& [param, offset] = bucket.params[i];
  return bucket.flat.narrow(0, offset, param.numel()).view(param.sizes());
}

::torch::Tensor DistributedModel::SlotAlias(const Bucket& bucket, size_t i) {
  // Not an autograd view of the bucket (Optimizer::zero_grad() calls detach_(), which views
  // refuse): a tensor sharing the bucket's storage, which it keeps alive.
  const auto& [param, offset] = bucket.params[i];
  return ::torch::empty({0}, bucket.flat.options())
      .set_(bucket.flat.storage(), offset, param.sizes(), param.strides());
}

void DistributedModel::OnGradient(size_t b, size_t i) {
  Bucket& bucket = buckets_[b];
  LoadGradient(bucket.params[i].first, Slot(bucket, i));
  ++bucket.arrived;
  LaunchReadyBuckets(false);
}

void DistributedModel::LaunchReadyBuckets(bool all) {
  // In bucket order on every rank, so the group sees the same sequence of all-reduces.
  while (next_launch_ < buckets_.size()) {
    Bucket& bucket = buckets_[next_launch_];
    if (!all && bucket.arrived < static_cast<int>(bucket.params.size())) return;
    if (all) AdoptGradients(bucket);
    if (elastic_) {
      ::torch::NoGradGuard no_grad;
      bucket.saved.copy_(bucket.flat);  // what a redo over the survivors starts from
    }
    const coll::CallOptions call = CallFor(bucket.flat);
    bucket.work =
        coll::AllReduceAsync(bucket.flat.data_ptr<float>(), bucket.flat.numel(),
                             coll::DataType::kFloat32, coll::ReduceOp::kAvg, group_, call);
    bucket.launched = true;
    ++next_launch_;
  }
}

void DistributedModel::AdoptGradients(Bucket& bucket) {
  // A bucket launched by SynchronizeGradients may hold parameters whose hook did not run this
  // step (no gradient): their slot must hold their current .grad, or zeros without one.
  for (size_t i = 0; i < bucket.params.size(); ++i)
    LoadGradient(bucket.params[i].first, Slot(bucket, i));
}

void DistributedModel::SynchronizeGradients() {
  internal::BeginStep();
  if (!distributed_) {  // one worker: nothing to average
    internal::CommitStep();
    return;
  }
  ::torch::NoGradGuard no_grad;
  try {
    LaunchReadyBuckets(true);  // parameters without a gradient this step contribute zeros
    FinishBuckets();
  } catch (const coll::CollectiveError& e) {
    DrainBuckets();  // nothing may still write into the buckets
    if (!internal::RecoverFromPeerFailure(e)) throw;
    RedoOnNewGeneration();
  }
  internal::CommitStep();
}

void DistributedModel::FinishBuckets() {
  for (Bucket& bucket : buckets_) {
    bucket.work.Wait();
    bucket.launched = false;
    // .grad becomes (or stays) the averaged slot itself: no copy now, and backward accumulates
    // straight into the bucket next step.
    for (size_t i = 0; i < bucket.params.size(); ++i) {
      ::torch::Tensor& param = bucket.params[i].first;
      if (param.grad().data_ptr() != Slot(bucket, i).data_ptr()) {
        param.mutable_grad() = SlotAlias(bucket, i);
      }
    }
    bucket.arrived = 0;
  }
  next_launch_ = 0;
  if (options_.broadcast_buffers) BroadcastBuffers();
}

void DistributedModel::DrainBuckets() {
  for (Bucket& bucket : buckets_) {
    if (bucket.launched) {
      try {
        bucket.work.Wait();
      } catch (const std::exception&) {
        // Failed like the one being handled.
      }
    }
    bucket.launched = false;
    bucket.arrived = 0;
  }
  next_launch_ = 0;
}

void DistributedModel::RedoOnNewGeneration() {
  while (true) {
    world_size_ = GetContext().world_size;
    try {
      for (Bucket& bucket : buckets_) {
        bucket.flat.copy_(bucket.saved);
        bucket.work = coll::AllReduceAsync(bucket.flat.data_ptr<float>(), bucket.flat.numel(),
                                           coll::DataType::kFloat32, coll::ReduceOp::kAvg, group_,
                                           CallFor(bucket.flat));
        bucket.launched = true;
      }
      FinishBuckets();
      return;
    } catch (const coll::CollectiveError& e) {
      DrainBuckets();
      if (!internal::RecoverFromPeerFailure(e)) throw;
    }
  }
}

void DistributedModel::BroadcastModel() {
  std::vector<::torch::Tensor> params, buffers;
  for (auto& p : module_->parameters()) params.push_back(p);
  for (auto& b : module_->buffers()) buffers.push_back(b);
  BroadcastTensors(params, group_);
  BroadcastTensors(buffers, group_);
}

void DistributedModel::EnableReplacements(::torch::optim::Optimizer& optimizer,
                                          ElasticSampler& sampler) {
  if (!internal::ReplacementsAllowed()) return;
  const std::string host_group = GetContext().host_group;
  ::torch::Device device(::torch::kCPU);
  if (!module_->parameters().empty()) device = module_->parameters()[0].device();
  // Rank 0's optimizer state and sampler position, to every member; a replacement takes them.
  // Host memory: the CPU side group. Adam's, AdamW's and SGD's state as tensors (every member
  // lists its own, a newcomer's made to match; rank 0's overwrite them, equal on the others);
  // any other optimizer's through torch's archive, which only a newcomer loads.
  auto share = [&optimizer, &sampler, host_group, device](bool receiving) {
    std::vector<int64_t> layout;
    if (GetContext().world_rank == 0) layout = optimizer_state::OptimizerStateLayout(optimizer);
    BroadcastInts(&layout, host_group);
    if (layout.at(0) != static_cast<int64_t>(optimizer_state::StateKind::kArchive)) {
      SendTensorsTo(optimizer_state::OptimizerStateTensors(optimizer, layout), host_group,
                    internal::StateReceivers(), /*on_host=*/true);
    } else {
      std::string bytes;
      if (GetContext().world_rank == 0) {
        ::torch::serialize::OutputArchive archive;
        optimizer.save(archive);
        std::ostringstream out;
        archive.save_to(out);
        bytes = out.str();
      }
      int64_t size = static_cast<int64_t>(bytes.size());
      coll::Broadcast(&size, 1, coll::DataType::kInt64, 0, host_group);
      bytes.resize(size);
      coll::Broadcast(bytes.data(), bytes.size(), coll::DataType::kUInt8, 0, host_group);
      if (receiving) {
        std::istringstream in(bytes);
        ::torch::serialize::InputArchive archive;
        archive.load_from(in, device);
        optimizer.load(archive);
      }
    }
    std::vector<int64_t> state = sampler.State();
    BroadcastInts(&state, host_group);
    if (receiving) sampler.Restore(state);
  };
  std::weak_ptr<DistributedModel> self = weak_from_this();
  internal::SetModelShare([self](bool) {
    if (auto model = self.lock()) model->ShareModel();
  });
  // A replacement that just joined: receive now (after a member's failure meanwhile, the whole
  // transfer again, as the members redo it).
  if (internal::SetLoopShare(share)) internal::ReceiveLoopState();
}

void DistributedModel::ShareModel() {
  const std::vector<int> receivers = internal::StateReceivers();
  std::vector<::torch::Tensor> params, buffers;
  for (auto& p : module_->parameters()) params.push_back(p);
  for (auto& b : module_->buffers()) buffers.push_back(b);
  SendTensorsTo(params, group_, receivers);
  SendTensorsTo(buffers, group_, receivers);
}

void DistributedModel::BroadcastBuffers() {
  std::vector<::torch::Tensor> buffers;
  for (auto& b : module_->buffers()) {
    if (b.is_floating_point()) buffers.push_back(b);
  }
  BroadcastTensors(buffers, group_);
}

bool LibTorchHasCuda() {
  // libtorch_cuda registers CUDA's device guard when it loads; a CPU-only build has none. (The
  // registry, c10/core/impl/DeviceGuardImplInterface.h, comes through <torch/torch.h>: the GPU
  // bundle's include check, gpu/bundle_test.sh, admits LibTorch headers only by torch paths.)
  return c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA);
}

::torch::Device CudaDevice(int index) {
  if (!LibTorchHasCuda()) {
    throw TroupeError(
        "this LibTorch has no CUDA (a CPU-only build, such as Debian's libtorch): build against "
        "a CUDA LibTorch to train on GPUs, or train on the CPU");
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible_note =
      visible == nullptr ? "" : " (CUDA_VISIBLE_DEVICES=" + std::string(visible) + ")";
  const int count = static_cast<int>(::torch::cuda::device_count());
  if (count == 0) {
    throw TroupeError("LibTorch sees no CUDA device" + visible_note +
                      ": check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES");
  }
  if (index < 0 || index >= count) {
    throw TroupeError("CUDA device " + std::to_string(index) + " does not exist: LibTorch sees " +
                      std::to_string(count) + " device(s)" + visible_note);
  }
  return ::torch::Device(::torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

::torch::Device WorkerDevice() {
  const std::vector<int> leased = GetGpuIds();
  if (leased.empty()) return ::torch::Device(::torch::kCPU);
  // A node with --gpu-visibility=assigned masks CUDA_VISIBLE_DEVICES to the lease: its first GPU
  // is device 0. Otherwise the worker sees the node's GPUs and the lease names the device.
  const char* visibility = std::getenv("TROUPE_GPU_VISIBILITY");
  const bool masked = visibility != nullptr && std::string(visibility) == "assigned";
  return CudaDevice(masked ? 0 : leased[0]);
}

std::shared_ptr<DistributedModel> PrepareModel(std::shared_ptr<::torch::nn::Module> module,
                                               DistributedOptions options) {
  auto model = std::make_shared<DistributedModel>(std::move(module), options);
  model->RegisterHooks();
  return model;
}

std::vector<double> SumAcrossWorkers(std::vector<double> values) {
  const Context& ctx = GetContext();
  while (ctx.world_size > 1 && !values.empty()) {
    std::vector<double> sums = values;  // a failed all-reduce leaves a mix behind
    try {
      // Host memory: the CPU side group, never the main group (NCCL with GPUs).
      coll::AllReduce(sums.data(), sums.size(), coll::DataType::kFloat64, coll::ReduceOp::kSum,
                      ctx.host_group);
      values = std::move(sums);
      break;
    } catch (const coll::CollectiveError& e) {
      if (!internal::RecoverFromPeerFailure(e)) throw;  // elastic: sum again over the survivors
    }
  }
  internal::CompleteSyncPoint();
  return values;
}

}  // namespace troupe::train::torch
