// troupe/train_torch.h outside the repository: two workers train a linear model on their own
// data with gradients averaged across them (PrepareModel, SynchronizeGradients), then count
// samples with SumAcrossWorkers. Both ranks end with the same weight; exits 0 only when the
// driver sees that.
#include <cmath>
#include <iostream>

#include "troupe/api.h"
#include "troupe/train.h"
#include "troupe/train_torch.h"

void TrainLoop(const troupe::train::LoopConfig& config) {
  const auto& context = troupe::train::GetContext();
  auto linear = std::make_shared<torch::nn::LinearImpl>(1, 1);
  auto model = troupe::train::torch::PrepareModel(linear);
  torch::optim::SGD optimizer(linear->parameters(), /*lr=*/0.1);
  // Each rank fits different data (y = (rank + 1) x); averaged gradients keep the ranks equal.
  torch::Tensor x = torch::ones({4, 1});
  torch::Tensor y = x * (context.world_rank + 1);
  for (int step = 0; step < 5; ++step) {
    optimizer.zero_grad();
    torch::mse_loss(linear->forward(x), y).backward();
    model->SynchronizeGradients();
    optimizer.step();
  }
  const double weight = linear->weight.item<double>();
  std::vector<double> sums = troupe::train::torch::SumAcrossWorkers({weight, 4.0});
  troupe::train::Report({{"weight_spread", std::abs(sums[0] - 2 * weight)}, {"samples", sums[1]}});
}
TROUPE_TRAIN_LOOP(TrainLoop);

int main(int argc, char** argv) {
  troupe::Config config;
  config.num_cpus = 4;  // an embedded cluster (unless TROUPE_ADDRESS names one) with room for both
  troupe::Init(config);
  troupe::train::RunConfig run;
  run.storage_path = argc > 1 ? argv[1] : "/tmp/troupe_torch_check";
  run.verbose = false;
  troupe::train::DataParallelTrainer trainer(TrainLoop, {}, {.num_workers = 2}, run);
  troupe::train::Result result = trainer.Fit();
  troupe::Shutdown();
  const bool ok = result.error.empty() && result.metrics["samples"] == 8 &&
                  result.metrics["weight_spread"] < 1e-6;
  std::cout << "samples = " << result.metrics["samples"]
            << ", weight spread across ranks = " << result.metrics["weight_spread"]
            << (result.error.empty() ? "" : ", error: " + result.error) << std::endl;
  return ok ? 0 : 1;
}
