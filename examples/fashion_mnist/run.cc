#include "examples/fashion_mnist/run.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "examples/fashion_mnist/fashion_mnist.h"
#include "src/common/flag_parser.h"
#include "troupe/api.h"
#include "troupe/train.h"
#include "troupe/train_torch.h"

namespace fashion_mnist {

int RunExample(int argc, char** argv, const std::string& program, const std::string& model,
               int default_epochs, int default_limit_batches) {
  // Started by a raylet as a worker: run the train loop's actors here, never return.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  std::string address, storage_path = "/tmp/troupe_results", data_dir = kDefaultDataDir;
  std::string lr_schedule = "constant", name = program, events_file;
  int64_t num_workers = 2, epochs = default_epochs, max_failures = 0, batch_size = 128;
  int64_t min_workers = 0, max_workers = 0;
  double step_timeout_s = 30;
  int64_t limit_batches = default_limit_batches, test_limit = 0, cpus_per_worker = 1, seed = 0;
  int64_t ckpt_every = 0;
  double lr = 1e-3, gpus_per_worker = 1, num_cpus = -1;
  std::string collective_backend = "auto";
  bool use_gpu = false, augment = false;
  troupe::FlagParser flags(program, "Data-parallel training of a " + model +
                                        " on FashionMNIST over Troupe worker actors.");
  flags.AddString("address", &address,
                  "Cluster to run on (default: $TROUPE_ADDRESS, else an embedded cluster).");
  flags.AddDouble("num-cpus", &num_cpus,
                  "Without --address or $TROUPE_ADDRESS: start an embedded cluster of this many "
                  "CPUs, even if a cluster runs on this machine (-1: use that cluster, else "
                  "embed one with the machine's CPUs).");
  flags.AddInt("num-workers", &num_workers, "Worker actors (data-parallel ranks).");
  flags.AddInt("min-workers", &min_workers,
               "Elastic training: go on without failed workers down to this many (0: "
               "--num-workers, no elasticity).");
  flags.AddInt("max-workers", &max_workers,
               "Elastic training: start replacement workers up to this many (0: none; at least "
               "--num-workers).");
  flags.AddDouble("step-timeout-s", &step_timeout_s,
                  "Elastic runs: a worker making no progress this long is dropped.");
  flags.AddInt("cpus-per-worker", &cpus_per_worker, "CPUs (and intra-op threads) per worker.");
  flags.AddBool("use-gpu", &use_gpu, "One GPU per worker, NCCL group (needs a CUDA build).");
  flags.AddDouble("gpus-per-worker", &gpus_per_worker,
                  "With --use-gpu: GPUs per worker (0.5: two workers share a card).");
  flags.AddString("collective-backend", &collective_backend,
                  "auto, cpu or nccl (auto: NCCL only for whole, distinct GPUs per worker).");
  flags.AddInt("epochs", &epochs, "Epochs to train.");
  flags.AddInt("batch-size", &batch_size, "Batch size per worker.");
  flags.AddDouble("lr", &lr, "Adam learning rate.");
  flags.AddString("lr-schedule", &lr_schedule, "constant, or cosine (decay over --epochs).");
  flags.AddBool("augment", &augment, "Random crops (pad 2) and horizontal flips.");
  flags.AddInt("limit-batches", &limit_batches, "Batches per epoch per worker (0: all).");
  flags.AddInt("test-limit", &test_limit, "Test images to evaluate on (0: all 10,000).");
  flags.AddString("data-dir", &data_dir, "Directory of the FashionMNIST .gz IDX files.");
  flags.AddString("storage-path", &storage_path, "Where checkpoints go (driver's machine).");
  flags.AddString("name", &name, "Run name (checkpoints under <storage-path>/<name>).");
  flags.AddInt("max-failures", &max_failures, "Restarts after worker failures (-1: forever).");
  flags.AddInt("seed", &seed, "Shuffling and initialisation seed.");
  flags.AddInt("checkpoint-every", &ckpt_every,
               "Also checkpoint every N steps within an epoch (0: at each epoch's end only).");
  flags.AddString("events-file", &events_file,
                  "Append a line per worker start, committed step and evaluation, with its "
                  "time, to this file (for bench/elastic_bench.py).");
  auto status = flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), std::string(status.message()).c_str());
    return 2;
  }
  if (lr_schedule != "constant" && lr_schedule != "cosine") {
    std::fprintf(stderr, "%s: --lr-schedule must be constant or cosine\n", program.c_str());
    return 2;
  }
  // The workers run this executable, so its LibTorch is theirs: without CUDA, say so now.
  if (use_gpu && !troupe::train::torch::LibTorchHasCuda()) {
    std::fprintf(stderr,
                 "%s: --use-gpu: this LibTorch has no CUDA (a CPU-only build, such as Debian's "
                 "libtorch); build against a CUDA LibTorch, or leave out --use-gpu\n",
                 program.c_str());
    return 2;
  }
  if (num_cpus >= 0 && !address.empty()) {
    std::fprintf(stderr, "%s: --num-cpus sizes an embedded cluster: leave out --address\n",
                 program.c_str());
    return 2;
  }
  if (ckpt_every < 0) {
    std::fprintf(stderr, "%s: --checkpoint-every must be 0 or more, got %lld\n", program.c_str(),
                 static_cast<long long>(ckpt_every));
    return 2;
  }
  troupe::Config config;
  config.address = address;
  config.num_cpus = num_cpus;
  troupe::Init(config);

  troupe::train::ScalingConfig scaling;
  scaling.num_workers = static_cast<int>(num_workers);
  scaling.min_workers = static_cast<int>(min_workers);
  scaling.max_workers = static_cast<int>(max_workers);
  scaling.use_gpu = use_gpu;
  scaling.resources_per_worker = {{"CPU", static_cast<double>(cpus_per_worker)}};
  if (use_gpu) scaling.resources_per_worker["GPU"] = gpus_per_worker;
  scaling.collective_backend = collective_backend;
  troupe::train::RunConfig run;
  run.name = name;
  run.storage_path = storage_path;
  run.failure_config.max_failures = static_cast<int>(max_failures);
  run.failure_config.step_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(step_timeout_s * 1000));
  run.checkpoint_config.num_to_keep = 2;
  run.checkpoint_config.score_attribute = "accuracy";
  troupe::train::DataParallelTrainer trainer(TrainLoop,
                                             {{"model", model},
                                              {"epochs", std::to_string(epochs)},
                                              {"batch_size", std::to_string(batch_size)},
                                              {"lr", std::to_string(lr)},
                                              {"lr_schedule", lr_schedule},
                                              {"augment", augment ? "1" : "0"},
                                              {"limit_batches", std::to_string(limit_batches)},
                                              {"test_limit", std::to_string(test_limit)},
                                              {"data_dir", data_dir},
                                              {"checkpoint_every", std::to_string(ckpt_every)},
                                              {"events_file", events_file},
                                              {"seed", std::to_string(seed)}},
                                             scaling, run);
  troupe::train::Result result;
  try {
    result = trainer.Fit();
  } catch (const troupe::TroupeError& e) {  // a configuration the trainer refuses
    result.error = e.what();
  }
  troupe::Shutdown();
  if (!result.error.empty()) {
    std::fprintf(stderr, "%s: training failed: %s\n", program.c_str(), result.error.c_str());
    return 1;
  }
  // The last report is the last epoch's (reports within an epoch, with --checkpoint-every, and
  // repeated ones after a restart make metrics_history longer than the epochs).
  std::printf("done: %d epochs, test accuracy %.4f, restarts %d\n",
              static_cast<int>(result.metrics["epoch"]), result.metrics["accuracy"],
              result.restarts);
  for (const auto& event : result.membership_events) {
    if (event.change == "joined") {
      std::printf(
          "generation %lld: a replacement joined after step %lld, %d workers went on, next step "
          "committed %.3f s after it asked to join\n",
          static_cast<long long>(event.generation), static_cast<long long>(event.step),
          event.world_size, event.recovery_s);
      continue;
    }
    if (event.change != "left") continue;
    std::printf(
        "generation %lld: rank(s) left (%s) in step %lld, %d workers went on, next step "
        "committed %.3f s after the failure\n",
        static_cast<long long>(event.generation), event.why.c_str(),
        static_cast<long long>(event.step + 1), event.world_size, event.recovery_s);
  }
  if (result.best_checkpoint) {
    std::printf("best checkpoint: %s (accuracy %.4f)\n", result.best_checkpoint->path.c_str(),
                result.best_checkpoint->metrics["accuracy"]);
  }
  return 0;
}

}  // namespace fashion_mnist
