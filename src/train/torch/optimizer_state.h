// An optimizer's state as plain tensors, for a replacement worker (DistributedModel::
// EnableReplacements): rank 0 describes its state (OptimizerStateLayout), every member makes its
// own state match that description and lists it in the same order (OptimizerStateTensors), and
// one broadcast of those tensors gives a newcomer rank 0's state. Adam's, AdamW's and SGD's state
// travels this way; any other optimizer through torch's archive (a zip of pickles: for ResNet18's
// Adam state about 0.1-0.4 s to write and as long to read on the 2-core VM, against tens of
// milliseconds for the copies of the plain path).
// Internal to //src/train:train_torch (and its test). Stateless functions; an optimizer must not
// be used by another thread while they run.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace troupe::train::optimizer_state {

// How an optimizer's state travels: the first element of a layout.
enum class StateKind : int64_t { kArchive = 0, kAdam = 1, kAdamW = 2, kSgd = 3 };

StateKind KindOf(::torch::optim::Optimizer& optimizer);

// Rank 0's description of its state: {kind, number of parameters, then for each parameter, in
// param_groups order: whether it has state, its step count, whether it has a third tensor
// (Adam's and AdamW's max_exp_avg_sq with amsgrad)}. For kArchive: {kArchive} alone.
std::vector<int64_t> OptimizerStateLayout(::torch::optim::Optimizer& optimizer);

// Makes `optimizer`'s state match `layout` (state made where missing, zeros of the parameter's
// shape, device and type; step counts set) and returns its tensors in the layout's order: the
// tensors a broadcast from rank 0 then fills. Throws std::invalid_argument if the layout does not
// fit this optimizer (another kind, another number of parameters).
std::vector<::torch::Tensor> OptimizerStateTensors(::torch::optim::Optimizer& optimizer,
                                                   const std::vector<int64_t>& layout);

}  // namespace troupe::train::optimizer_state
