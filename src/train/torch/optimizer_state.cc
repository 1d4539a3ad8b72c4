#include "src/train/torch/optimizer_state.h"

#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace troupe::train::optimizer_state {
namespace {

namespace optim = ::torch::optim;

// The key LibTorch files a parameter's state under: the address of its TensorImpl, as a string
// before LibTorch 2 (c10::guts::to_string, an ostream of the pointer), as the pointer since.
template <typename Map>
typename Map::key_type KeyOf(const Map&, const ::torch::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;
    out << p.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

std::vector<::torch::Tensor> Parameters(optim::Optimizer& optimizer) {
  std::vector<::torch::Tensor> params;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) params.push_back(p);
  }
  return params;
}

optim::OptimizerParamState* StateOf(optim::Optimizer& optimizer, const ::torch::Tensor& p) {
  auto& state = optimizer.state();
  auto it = state.find(KeyOf(state, p));
  return it == state.end() ? nullptr : it->second.get();
}

// Adam's and AdamW's parameter states have the same fields under two types.
template <typename State>
void Describe(optim::OptimizerParamState* base, std::vector<int64_t>* layout) {
  auto* s = static_cast<State*>(base);
  layout->insert(layout->end(), {1, s->step(), s->max_exp_avg_sq().defined() ? 1 : 0});
}

template <typename State>
void Collect(optim::Optimizer& optimizer, const ::torch::Tensor& p, int64_t step, bool third,
             std::vector<::torch::Tensor>* out) {
  auto& state = optimizer.state();
  auto& slot = state[KeyOf(state, p)];
  if (!slot) {
    auto made = std::make_unique<State>();
    made->exp_avg(::torch::zeros_like(p, ::torch::MemoryFormat::Preserve));
    made->exp_avg_sq(::torch::zeros_like(p, ::torch::MemoryFormat::Preserve));
    slot = std::move(made);
  }
  auto* s = static_cast<State*>(slot.get());
  s->step(step);
  if (third && !s->max_exp_avg_sq().defined()) {
    s->max_exp_avg_sq(::torch::zeros_like(p, ::torch::MemoryFormat::Preserve));
  }
  out->push_back(s->exp_avg());
  out->push_back(s->exp_avg_sq());
  if (third) out->push_back(s->max_exp_avg_sq());
}

}  // namespace

StateKind KindOf(optim::Optimizer& optimizer) {
  if (dynamic_cast<optim::Adam*>(&optimizer) != nullptr) return StateKind::kAdam;
  if (dynamic_cast<optim::AdamW*>(&optimizer) != nullptr) return StateKind::kAdamW;
  if (dynamic_cast<optim::SGD*>(&optimizer) != nullptr) return StateKind::kSgd;
  return StateKind::kArchive;
}

std::vector<int64_t> OptimizerStateLayout(optim::Optimizer& optimizer) {
  const StateKind kind = KindOf(optimizer);
  std::vector<int64_t> layout = {static_cast<int64_t>(kind)};
  if (kind == StateKind::kArchive) return layout;
  const std::vector<::torch::Tensor> params = Parameters(optimizer);
  layout.push_back(static_cast<int64_t>(params.size()));
  for (const auto& p : params) {
    optim::OptimizerParamState* state = StateOf(optimizer, p);
    if (state == nullptr) {
      layout.insert(layout.end(), {0, 0, 0});
    } else if (kind == StateKind::kAdam) {
      Describe<optim::AdamParamState>(state, &layout);
    } else if (kind == StateKind::kAdamW) {
      Describe<optim::AdamWParamState>(state, &layout);
    } else {
      layout.insert(layout.end(), {1, 0, 0});  // SGD: its momentum buffer
    }
  }
  return layout;
}

std::vector<::torch::Tensor> OptimizerStateTensors(optim::Optimizer& optimizer,
                                                   const std::vector<int64_t>& layout) {
  const StateKind kind = KindOf(optimizer);
  if (layout.empty() || layout[0] != static_cast<int64_t>(kind)) {
    throw std::invalid_argument(
        "the optimizer state received is of another optimizer type than this worker's: every "
        "worker must build the same optimizer");
  }
  std::vector<::torch::Tensor> tensors;
  if (kind == StateKind::kArchive) return tensors;
  const std::vector<::torch::Tensor> params = Parameters(optimizer);
  if (layout.size() != 2 + 3 * params.size() || layout[1] != static_cast<int64_t>(params.size())) {
    throw std::invalid_argument(
        "the optimizer state received is for " + std::to_string(layout.size() < 2 ? 0 : layout[1]) +
        " parameters, this worker's optimizer has " + std::to_string(params.size()) +
        ": every worker must build the same model and optimizer");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t* entry = &layout[2 + 3 * i];
    if (entry[0] == 0) continue;  // no state yet on rank 0 (never stepped with a gradient)
    const ::torch::Tensor& p = params[i];
    if (kind == StateKind::kAdam) {
      Collect<optim::AdamParamState>(optimizer, p, entry[1], entry[2] != 0, &tensors);
    } else if (kind == StateKind::kAdamW) {
      Collect<optim::AdamWParamState>(optimizer, p, entry[1], entry[2] != 0, &tensors);
    } else {
      auto& state = optimizer.state();
      auto& slot = state[KeyOf(state, p)];
      if (!slot) {
        auto made = std::make_unique<optim::SGDParamState>();
        made->momentum_buffer(::torch::zeros_like(p, ::torch::MemoryFormat::Preserve));
        slot = std::move(made);
      }
      tensors.push_back(static_cast<optim::SGDParamState*>(slot.get())->momentum_buffer());
    }
  }
  return tensors;
}

}  // namespace troupe::train::optimizer_state
