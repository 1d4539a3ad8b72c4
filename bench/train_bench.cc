// Troupe's side of the training-throughput benchmark: ResNet18 (FashionMNIST's 1x28x28 input,
// 10 classes) trained with Adam 1e-3, batch 128 per worker, one intra-op thread per worker, on
// fixed random batches of FashionMNIST's shape. Prints JSON lines with images/s:
//   --mode=plain      a plain single-process LibTorch loop (no Troupe at all)
//   --mode=troupe     DataParallelTrainer with --workers workers on an embedded cluster, or on
//                     the running cluster at $TROUPE_ADDRESS when that is set; --spread puts
//                     the workers one per node (placement STRICT_SPREAD)
// bench/train_bench.py runs these and PyTorch DDP (gloo) side by side.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "examples/fashion_mnist/fashion_mnist.h"
#include "troupe/api.h"
#include "troupe/train.h"
#include "troupe/train_torch.h"

namespace {

constexpr int kBatch = 128;

// Runs warmup + steps training steps on `model`; returns images/s of the timed steps.
double TrainSteps(std::shared_ptr<torch::nn::Module> model,
                  troupe::train::torch::DistributedModel* ddp, int warmup, int steps) {
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({kBatch, 1, 28, 28});
  torch::Tensor y = torch::randint(0, 10, {kBatch}, torch::kInt64);
  std::chrono::steady_clock::time_point start;
  for (int i = 0; i < warmup + steps; ++i) {
    if (i == warmup) start = std::chrono::steady_clock::now();
    torch::Tensor loss = torch::nn::functional::cross_entropy(fashion_mnist::Forward(*model, x), y);
    optimizer.zero_grad();
    loss.backward();
    if (ddp != nullptr) ddp->SynchronizeGradients();
    optimizer.step();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return steps * kBatch / seconds;
}

void BenchLoop(const troupe::train::LoopConfig& config) {
  auto model = fashion_mnist::MakeResNet18();
  auto ddp = troupe::train::torch::PrepareModel(model);
  const double rate =
      TrainSteps(model, ddp.get(), std::stoi(config.at("warmup")), std::stoi(config.at("steps")));
  // Global throughput: every worker's images.
  auto total = troupe::train::torch::SumAcrossWorkers({rate});
  troupe::train::Report({{"images_per_s", total[0]}});
}
TROUPE_TRAIN_LOOP(BenchLoop);

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  std::string mode = "plain";
  int workers = 1, steps = 20, warmup = 3;
  bool spread = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "--mode=", 7)) mode = argv[i] + 7;
    if (!std::strncmp(argv[i], "--workers=", 10)) workers = std::atoi(argv[i] + 10);
    if (!std::strncmp(argv[i], "--steps=", 8)) steps = std::atoi(argv[i] + 8);
    if (!std::strncmp(argv[i], "--warmup=", 9)) warmup = std::atoi(argv[i] + 9);
    if (!std::strcmp(argv[i], "--spread")) spread = true;
  }
  double rate = 0;
  if (mode == "plain") {
    torch::set_num_threads(1);
    rate = TrainSteps(fashion_mnist::MakeResNet18(), nullptr, warmup, steps);
  } else {
    troupe::Config config;  // address empty: $TROUPE_ADDRESS if set, else an embedded cluster
    if (std::getenv("TROUPE_ADDRESS") == nullptr) config.num_cpus = workers;
    config.log_to_driver = false;
    troupe::Init(config);
    troupe::train::ScalingConfig scaling;
    scaling.num_workers = workers;
    if (spread) scaling.placement_strategy = "STRICT_SPREAD";
    troupe::train::RunConfig run;
    run.name = "train_bench";
    run.storage_path = "/tmp/troupe_bench_results";
    run.verbose = false;
    auto result =
        troupe::train::DataParallelTrainer(
            BenchLoop, {{"steps", std::to_string(steps)}, {"warmup", std::to_string(warmup)}},
            scaling, run)
            .Fit();
    troupe::Shutdown();
    if (!result.error.empty()) {
      std::fprintf(stderr, "train_bench: %s\n", result.error.c_str());
      return 1;
    }
    rate = result.metrics["images_per_s"];
  }
  std::printf("{\"impl\": \"%s\", \"workers\": %d, \"images_per_s\": %.2f}\n",
              mode == "plain" ? "libtorch" : "troupe", mode == "plain" ? 1 : workers, rate);
  return 0;
}
