// A replacement's optimizer state as plain tensors (optimizer_state.h), without a cluster: rank 0's
// layout and tensors copied into a fresh optimizer over an identical model (what the broadcast
// does) make the next step identical to rank 0's, for Adam (with and without amsgrad), AdamW and
// SGD with momentum; a mismatched layout is a clear error.
#include "src/train/torch/optimizer_state.h"

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

using troupe::train::optimizer_state::KindOf;
using troupe::train::optimizer_state::OptimizerStateLayout;
using troupe::train::optimizer_state::OptimizerStateTensors;
using troupe::train::optimizer_state::StateKind;

torch::nn::Sequential MakeModel() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                               torch::nn::Linear(16, 3));
}

// One step on a fixed batch.
void Step(torch::nn::Sequential& model, torch::optim::Optimizer& optimizer, int seed) {
  torch::manual_seed(seed);
  optimizer.zero_grad();
  torch::Tensor x = torch::randn({4, 8});
  torch::Tensor y = torch::randint(0, 3, {4});
  torch::nn::functional::cross_entropy(model->forward(x), y).backward();
  optimizer.step();
}

void CopyParameters(torch::nn::Sequential& from, torch::nn::Sequential& to) {
  torch::NoGradGuard no_grad;
  auto a = from->parameters(), b = to->parameters();
  for (size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
}

bool SameParameters(torch::nn::Sequential& a, torch::nn::Sequential& b) {
  auto x = a->parameters(), y = b->parameters();
  for (size_t i = 0; i < x.size(); ++i) {
    if (!torch::equal(x[i], y[i])) return false;
  }
  return true;
}

// Rank 0 trains three steps; a newcomer gets its parameters and (through the layout and the
// tensors) its optimizer state; both take the same fourth step. Returns whether they agree, and
// whether the newcomer without the state would have agreed (it must not: the state matters).
struct Outcome {
  bool agree = false;
  bool agree_without_state = false;
  StateKind kind = StateKind::kArchive;
  size_t tensors = 0;
};

Outcome Transfer(
    const std::function<std::unique_ptr<torch::optim::Optimizer>(torch::nn::Sequential&)>& make) {
  Outcome outcome;
  auto rank0 = MakeModel();
  auto rank0_optimizer = make(rank0);
  for (int s = 0; s < 3; ++s) Step(rank0, *rank0_optimizer, s);
  outcome.kind = KindOf(*rank0_optimizer);

  auto newcomer = MakeModel();
  auto newcomer_optimizer = make(newcomer);
  CopyParameters(rank0, newcomer);
  const std::vector<int64_t> layout = OptimizerStateLayout(*rank0_optimizer);
  std::vector<torch::Tensor> theirs = OptimizerStateTensors(*rank0_optimizer, layout);
  std::vector<torch::Tensor> mine = OptimizerStateTensors(*newcomer_optimizer, layout);
  outcome.tensors = mine.size();
  EXPECT_EQ(theirs.size(), mine.size());
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < mine.size() && i < theirs.size(); ++i) mine[i].copy_(theirs[i]);
  }
  auto stateless = MakeModel();
  auto stateless_optimizer = make(stateless);
  CopyParameters(rank0, stateless);

  Step(rank0, *rank0_optimizer, 3);
  Step(newcomer, *newcomer_optimizer, 3);
  Step(stateless, *stateless_optimizer, 3);
  outcome.agree = SameParameters(rank0, newcomer);
  outcome.agree_without_state = SameParameters(rank0, stateless);
  return outcome;
}

TEST(OptimizerStateTest, AdamStateTravelsAsTensors) {
  const Outcome outcome = Transfer([](torch::nn::Sequential& m) {
    return std::make_unique<torch::optim::Adam>(m->parameters(), torch::optim::AdamOptions(0.01));
  });
  EXPECT_EQ(outcome.kind, StateKind::kAdam);
  EXPECT_EQ(outcome.tensors, 8u) << "exp_avg and exp_avg_sq of 4 parameters";
  EXPECT_TRUE(outcome.agree);
  EXPECT_FALSE(outcome.agree_without_state) << "the step count and moments must matter";
}

TEST(OptimizerStateTest, AdamWithAmsgradCarriesItsThirdTensor) {
  const Outcome outcome = Transfer([](torch::nn::Sequential& m) {
    return std::make_unique<torch::optim::Adam>(m->parameters(),
                                                torch::optim::AdamOptions(0.01).amsgrad(true));
  });
  EXPECT_EQ(outcome.tensors, 12u);
  EXPECT_TRUE(outcome.agree);
  EXPECT_FALSE(outcome.agree_without_state);
}

TEST(OptimizerStateTest, AdamWStateTravelsAsTensors) {
  const Outcome outcome = Transfer([](torch::nn::Sequential& m) {
    return std::make_unique<torch::optim::AdamW>(m->parameters(), torch::optim::AdamWOptions(0.01));
  });
  EXPECT_EQ(outcome.kind, StateKind::kAdamW);
  EXPECT_EQ(outcome.tensors, 8u);
  EXPECT_TRUE(outcome.agree);
  EXPECT_FALSE(outcome.agree_without_state);
}

TEST(OptimizerStateTest, SgdMomentumTravelsAsTensors) {
  const Outcome outcome = Transfer([](torch::nn::Sequential& m) {
    return std::make_unique<torch::optim::SGD>(m->parameters(),
                                               torch::optim::SGDOptions(0.1).momentum(0.9));
  });
  EXPECT_EQ(outcome.kind, StateKind::kSgd);
  EXPECT_EQ(outcome.tensors, 4u);
  EXPECT_TRUE(outcome.agree);
  EXPECT_FALSE(outcome.agree_without_state);
}

TEST(OptimizerStateTest, OtherOptimizersGoThroughTheArchive) {
  auto model = MakeModel();
  torch::optim::RMSprop optimizer(model->parameters(), torch::optim::RMSpropOptions(0.01));
  Step(model, optimizer, 0);
  EXPECT_EQ(OptimizerStateLayout(optimizer), std::vector<int64_t>{0});
  EXPECT_TRUE(OptimizerStateTensors(optimizer, {0}).empty());
}

TEST(OptimizerStateTest, AMismatchedLayoutIsAClearError) {
  auto model = MakeModel();
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  Step(model, adam, 0);
  const std::vector<int64_t> layout = OptimizerStateLayout(adam);
  try {
    OptimizerStateTensors(sgd, layout);
    ADD_FAILURE() << "an Adam layout was taken by SGD";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("another optimizer type"), std::string::npos) << e.what();
  }
  std::vector<int64_t> short_layout = layout;
  short_layout[1] = 2;
  short_layout.resize(2 + 3 * 2);
  try {
    OptimizerStateTensors(adam, short_layout);
    ADD_FAILURE() << "a layout for 2 parameters was taken for 4";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("for 2 parameters, this worker's optimizer has 4"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
