// Troupe's side of the training-throughput benchmark: ResNet18 (FashionMNIST's 1x28x28 input,
// 10 classes) trained with Adam 1e-3, batch 128 per worker, one intra-op thread per worker, on
// fixed random batches of FashionMNIST's shape. Prints JSON lines with images/s:
//   --mode=plain      a plain single-process LibTorch loop (no Troupe at all)
//   --mode=troupe     DataParallelTrainer with --workers workers on an embedded cluster, or on
//                     the running cluster at $TROUPE_ADDRESS when that is set; --spread puts
//                     the workers one per node (placement STRICT_SPREAD)
//   --device=cpu|cuda where the model and batches live (default cpu; --use-gpu is --device=cuda;
//                     CUDA needs a LibTorch built for it). plain: CUDA device 0 of this process
//                     (pick it with CUDA_VISIBLE_DEVICES); troupe: use_gpu, each worker on its
//                     leased GPU (WorkerDevice). So the same model on the same GPU compares plain
//                     LibTorch with Troupe's trainer (--workers=1). With --mode=troupe
//                     --gpus-per-worker=F (default 1; 0.5 puts two workers on one card) and
//                     --collective-backend=auto|cpu|nccl (ScalingConfig::collective_backend)
// Each rank trains on its own random batches; after the timed steps the ranks compare their
// parameters, and a troupe run whose replicas differ (gradients not averaged) exits 1.
// bench/train_bench.py runs these and PyTorch DDP (gloo) side by side.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "examples/fashion_mnist/fashion_mnist.h"
#include "troupe/api.h"
#include "troupe/collective.h"
#include "troupe/train.h"
#include "troupe/train_torch.h"

namespace {

constexpr int kBatch = 128;

// What the calling thread used so far: CPU seconds and minor page faults.
struct ThreadUsage {
  double cpu_s;
  long minor_faults;
};
ThreadUsage UsageNow() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return {seconds(usage.ru_utime) + seconds(usage.ru_stime), usage.ru_minflt};
}

// The timed steps' figures.
struct StepStats {
  double images_per_s = 0;
  double images_per_cpu_s = 0;  // per CPU second of the training thread (robust to load)
  double faults_per_step = 0;   // the training thread's minor page faults
  double sync_ms = 0;           // per step, in SynchronizeGradients (waiting for all-reduces)
};

// Waits for the work queued on `device` (CUDA runs asynchronously to the host).
void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Runs warmup + steps training steps on `model`, which lives on `device` (the batch moves there).
StepStats TrainSteps(std::shared_ptr<torch::nn::Module> model,
                     troupe::train::torch::DistributedModel* ddp, int warmup, int steps,
                     torch::Device device = torch::kCPU, int rank = 0) {
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::manual_seed(rank);
  torch::Tensor x = torch::randn({kBatch, 1, 28, 28}).to(device);
  torch::Tensor y = torch::randint(0, 10, {kBatch}, torch::kInt64).to(device);
  std::chrono::steady_clock::time_point start;
  ThreadUsage before{};
  std::chrono::steady_clock::duration sync{};
  for (int i = 0; i < warmup + steps; ++i) {
    if (i == warmup) {
      Synchronize(device);  // the warm-up steps the GPU still runs do not count
      start = std::chrono::steady_clock::now();
      before = UsageNow();
    }
    torch::Tensor loss = torch::nn::functional::cross_entropy(fashion_mnist::Forward(*model, x), y);
    optimizer.zero_grad();
    loss.backward();
    if (ddp != nullptr) {
      const auto sync_start = std::chrono::steady_clock::now();
      ddp->SynchronizeGradients();
      if (i >= warmup) sync += std::chrono::steady_clock::now() - sync_start;
    }
    optimizer.step();
  }
  Synchronize(device);  // the GPU's queued steps count in the time
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const ThreadUsage after = UsageNow();
  return {steps * kBatch / seconds, steps * kBatch / (after.cpu_s - before.cpu_s),
          static_cast<double>(after.minor_faults - before.minor_faults) / steps,
          std::chrono::duration<double, std::milli>(sync).count() / steps};
}

// 1 when this rank's parameters differ from rank 0's (bit for bit), else 0.
double DiffersFromRankZero(torch::nn::Module& model) {
  std::vector<torch::Tensor> parts;
  // On the parameters' device: an NCCL group takes device memory only; a CPU group stages it.
  for (const auto& p : model.parameters()) parts.push_back(p.detach().reshape(-1));
  torch::Tensor mine = torch::cat(parts).contiguous();
  torch::Tensor zeros = mine.clone();
  troupe::collective::Broadcast(zeros.data_ptr<float>(), zeros.numel(),
                                troupe::collective::DataType::kFloat32, 0,
                                troupe::train::GetContext().group);
  return torch::equal(mine, zeros) ? 0 : 1;
}

void BenchLoop(const troupe::train::LoopConfig& config) {
  const auto& ctx = troupe::train::GetContext();
  const torch::Device device = troupe::train::torch::WorkerDevice();  // its GPU with use_gpu
  auto model = fashion_mnist::MakeResNet18();
  model->to(device);
  auto ddp = troupe::train::torch::PrepareModel(model);
  const StepStats stats = TrainSteps(model, ddp.get(), std::stoi(config.at("warmup")),
                                     std::stoi(config.at("steps")), device, ctx.world_rank);
  const double differs = ctx.world_size > 1 ? DiffersFromRankZero(*model) : 0;
  // Global throughput: every worker's images; the other figures averaged over the workers.
  const double n = ctx.world_size;
  auto total = troupe::train::torch::SumAcrossWorkers({stats.images_per_s, stats.images_per_cpu_s,
                                                       stats.faults_per_step / n, stats.sync_ms / n,
                                                       differs});
  troupe::train::Report({{"images_per_s", total[0]},
                         {"images_per_cpu_s", total[1]},
                         {"faults_per_step", total[2]},
                         {"sync_ms", total[3]},
                         {"replicas_differ", total[4]},
                         {"nccl", ctx.collective_backend == "nccl" ? 1 : 0}});
}
TROUPE_TRAIN_LOOP(BenchLoop);

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  std::string mode = "plain", device_name = "cpu";
  int workers = 1, steps = 20, warmup = 3;
  bool spread = false;
  double gpus_per_worker = 1;
  std::string collective_backend = "auto";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--use-gpu")) device_name = "cuda";
    if (!std::strncmp(argv[i], "--device=", 9)) device_name = argv[i] + 9;
    if (!std::strncmp(argv[i], "--gpus-per-worker=", 18)) gpus_per_worker = std::atof(argv[i] + 18);
    if (!std::strncmp(argv[i], "--collective-backend=", 21)) collective_backend = argv[i] + 21;
    if (!std::strncmp(argv[i], "--mode=", 7)) mode = argv[i] + 7;
    if (!std::strncmp(argv[i], "--workers=", 10)) workers = std::atoi(argv[i] + 10);
    if (!std::strncmp(argv[i], "--steps=", 8)) steps = std::atoi(argv[i] + 8);
    if (!std::strncmp(argv[i], "--warmup=", 9)) warmup = std::atoi(argv[i] + 9);
    if (!std::strcmp(argv[i], "--spread")) spread = true;
  }
  if (mode != "plain" && mode != "troupe") {
    std::fprintf(stderr, "train_bench: --mode must be plain or troupe, got '%s'\n", mode.c_str());
    return 2;
  }
  if (device_name != "cpu" && device_name != "cuda") {
    std::fprintf(stderr, "train_bench: --device must be cpu or cuda, got '%s'\n",
                 device_name.c_str());
    return 2;
  }
  const bool use_gpu = device_name == "cuda";
  // Checked here for both modes: the workers run this executable, with this LibTorch.
  if (use_gpu && !troupe::train::torch::LibTorchHasCuda()) {
    std::fprintf(stderr,
                 "train_bench: --device=cuda: this LibTorch has no CUDA (a CPU-only build, such "
                 "as Debian's libtorch); build against a CUDA LibTorch, or use --device=cpu\n");
    return 2;
  }
  StepStats stats;
  std::string backend = "none";
  if (mode == "plain") {
    torch::Device device(torch::kCPU);
    try {
      if (use_gpu) device = troupe::train::torch::CudaDevice(0);
    } catch (const troupe::TroupeError& e) {
      std::fprintf(stderr, "train_bench: --device=cuda: %s\n", e.what());
      return 2;
    }
    torch::set_num_threads(1);
    auto run = [&] {
      auto model = fashion_mnist::MakeResNet18();
      model->to(device);
      stats = TrainSteps(model, nullptr, warmup, steps, device);
    };
    if (std::getenv("TRAIN_BENCH_THREAD") != nullptr) {  // experiment: the loop on a std::thread
      std::thread(run).join();
    } else {
      run();
    }
  } else {
    troupe::Config config;  // address empty: $TROUPE_ADDRESS if set, else an embedded cluster
    if (std::getenv("TROUPE_ADDRESS") == nullptr) config.num_cpus = workers;
    config.log_to_driver = false;
    troupe::Init(config);
    troupe::train::ScalingConfig scaling;
    scaling.num_workers = workers;
    if (spread) scaling.placement_strategy = "STRICT_SPREAD";
    scaling.use_gpu = use_gpu;
    if (use_gpu) scaling.resources_per_worker = {{"CPU", 1}, {"GPU", gpus_per_worker}};
    scaling.collective_backend = collective_backend;
    troupe::train::RunConfig run;
    run.name = "train_bench";
    run.storage_path = "/tmp/troupe_bench_results";
    run.verbose = false;
    troupe::train::Result result;
    try {
      result =
          troupe::train::DataParallelTrainer(
              BenchLoop, {{"steps", std::to_string(steps)}, {"warmup", std::to_string(warmup)}},
              scaling, run)
              .Fit();
    } catch (const troupe::TroupeError& e) {  // a bad configuration
      result.error = e.what();
    }
    troupe::Shutdown();
    if (!result.error.empty()) {
      std::fprintf(stderr, "train_bench: %s\n", result.error.c_str());
      return 1;
    }
    stats = {result.metrics["images_per_s"], result.metrics["images_per_cpu_s"],
             result.metrics["faults_per_step"], result.metrics["sync_ms"]};
    backend = result.metrics["nccl"] == 1 ? "nccl" : "cpu";
    if (result.metrics["replicas_differ"] != 0) {
      std::fprintf(stderr,
                   "train_bench: %.0f of %d ranks ended with parameters that differ from rank "
                   "0's: gradients were not averaged\n",
                   result.metrics["replicas_differ"], workers);
      return 1;
    }
  }
  std::printf(
      "{\"impl\": \"%s\", \"workers\": %d, \"images_per_s\": %.2f, \"images_per_cpu_s\": %.2f, "
      "\"faults_per_step\": %.1f, \"sync_ms\": %.2f, \"device\": \"%s\", "
      "\"collective_backend\": \"%s\"}\n",
      mode == "plain" ? "libtorch" : "troupe", mode == "plain" ? 1 : workers, stats.images_per_s,
      stats.images_per_cpu_s, stats.faults_per_step, stats.sync_ms, use_gpu ? "cuda" : "cpu",
      backend.c_str());
  return 0;
}
