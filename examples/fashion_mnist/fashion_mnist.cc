#include "examples/fashion_mnist/fashion_mnist.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "troupe/train_data.h"
#include "troupe/train_torch.h"

namespace fashion_mnist {
namespace {

namespace nn = torch::nn;

std::string ReadGzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw std::runtime_error("cannot open " + path +
                             " (install dataset-fashion-mnist, or pass --data-dir)");
  }
  std::string out;
  char chunk[1 << 16];
  int n;
  while ((n = gzread(file, chunk, sizeof(chunk))) > 0) out.append(chunk, n);
  const bool failed = n < 0;
  gzclose(file);
  if (failed) throw std::runtime_error(path + ": not a readable gzip file");
  return out;
}

uint32_t BigEndian(const std::string& data, size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data() + offset);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)),
        bn1(out),
        conv2(nn::Conv2dOptions(out, out, 3).stride(1).padding(1).bias(false)),
        bn2(out) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    if (stride != 1 || in != out) {
      downsample =
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(out));
      register_module("downsample", downsample);
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = downsample.is_empty() ? x : downsample->forward(x);
    x = torch::relu(bn1(conv1(x)));
    x = bn2(conv2(x));
    return torch::relu(x + identity);
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

struct ResNet18Impl : nn::Module {
  ResNet18Impl()
      : conv1(nn::Conv2dOptions(1, 64, 7).stride(2).padding(3).bias(false)), bn1(64), fc(512, 10) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    int64_t in = 64;
    const int64_t widths[] = {64, 128, 256, 512};
    for (int i = 0; i < 4; ++i) {
      nn::Sequential layer(BasicBlock(in, widths[i], i == 0 ? 1 : 2),
                           BasicBlock(widths[i], widths[i], 1));
      layers.push_back(register_module("layer" + std::to_string(i + 1), layer));
      in = widths[i];
    }
    register_module("fc", fc);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1(conv1(x)));
    x = torch::max_pool2d(x, 3, 2, 1);
    for (auto& layer : layers) x = layer->forward(x);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc(x);
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  std::vector<nn::Sequential> layers;
  nn::Linear fc;
};
TORCH_MODULE(ResNet18);

struct MlpImpl : nn::Module {
  MlpImpl() : fc1(784, 512), fc2(512, 512), fc3(512, 10) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1(x.flatten(1)));
    x = torch::relu(fc2(x));
    return fc3(x);
  }
  nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

std::string Get(const troupe::train::LoopConfig& config, const std::string& key,
                const std::string& fallback) {
  auto it = config.find(key);
  return it == config.end() ? fallback : it->second;
}

// Random 28x28 crops of the images padded by 2, and random horizontal flips.
torch::Tensor Augment(const torch::Tensor& batch, std::mt19937& random) {
  torch::Tensor padded = torch::constant_pad_nd(batch, {2, 2, 2, 2}, (0 - kMean) / kStd);
  torch::Tensor out = torch::empty_like(batch);
  for (int64_t i = 0; i < batch.size(0); ++i) {
    const int dy = random() % 5, dx = random() % 5;
    torch::Tensor crop = padded[i].narrow(1, dy, 28).narrow(2, dx, 28);
    out[i].copy_(random() % 2 ? crop.flip({2}) : crop);
  }
  return out;
}

// Appends one line to the events file (bench/elastic_bench.py reads it): "<kind> t=<unix time>
// <fields>", in one write with O_APPEND, so lines of several processes never interleave. Best
// effort: training never fails for it.
void AppendEvent(const std::string& path, const std::string& kind, const std::string& fields) {
  if (path.empty()) return;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  char head[64];
  std::snprintf(head, sizeof(head), " t=%.6f ", now);
  const std::string line = kind + head + fields + "\n";
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (write(fd, line.data(), line.size()) < 0) {
    // Nothing to do: the bench then misses one line and says so.
  }
  close(fd);
}

// Rank 0's checkpoint directories are <temp>/troupe-ckpt-<experiment>-<pid>: one per process,
// written before each Report (which packs it) and removed right after it, or when the loop ends.
std::string CheckpointDirPrefix(const std::string& experiment) {
  return (std::filesystem::temp_directory_path() / ("troupe-ckpt-" + experiment + "-")).string();
}

// A rank 0 SIGKILLed between writing and reporting (the driver kills an attempt's workers when
// the attempt fails) leaves its directory behind: the next run of the loop removes those of
// processes that no longer exist.
void RemoveCheckpointDirsOfDeadProcesses(const std::string& prefix) {
  std::error_code error;
  const std::filesystem::path temp = std::filesystem::path(prefix).parent_path();
  const std::string name_prefix = std::filesystem::path(prefix).filename().string();
  std::filesystem::directory_iterator entries(temp, error);
  for (; !error && entries != std::filesystem::directory_iterator(); entries.increment(error)) {
    const std::string name = entries->path().filename().string();
    if (name.rfind(name_prefix, 0) != 0) continue;
    const std::string pid_text = name.substr(name_prefix.size());
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos ||
        pid_text.size() > 9) {
      continue;
    }
    const int pid = std::stoi(pid_text);
    if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (EPERM: another user's)
    std::error_code ignored;
    std::filesystem::remove_all(entries->path(), ignored);
  }
}

}  // namespace

Split Load(const std::string& dir, const std::string& prefix) {
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  const std::string images = ReadGzip(images_path), labels = ReadGzip(labels_path);
  if (images.size() < 16 || BigEndian(images, 0) != 2051) {
    throw std::runtime_error(images_path + ": not an IDX image file (magic 2051)");
  }
  if (labels.size() < 8 || BigEndian(labels, 0) != 2049) {
    throw std::runtime_error(labels_path + ": not an IDX label file (magic 2049)");
  }
  const int64_t n = BigEndian(images, 4), rows = BigEndian(images, 8), cols = BigEndian(images, 12);
  if (rows != 28 || cols != 28 || images.size() != 16 + static_cast<size_t>(n * 784) ||
      BigEndian(labels, 4) != n || labels.size() != 8 + static_cast<size_t>(n)) {
    throw std::runtime_error(prefix + ": image and label files do not match (truncated?)");
  }
  Split split;
  split.images =
      torch::from_blob(const_cast<char*>(images.data()) + 16, {n, 1, 28, 28}, torch::kUInt8)
          .to(torch::kFloat32)
          .div_(255)
          .sub_(kMean)
          .div_(kStd);
  split.labels =
      torch::from_blob(const_cast<char*>(labels.data()) + 8, {n}, torch::kUInt8).to(torch::kInt64);
  return split;
}

std::shared_ptr<torch::nn::Module> MakeResNet18() { return ResNet18().ptr(); }
std::shared_ptr<torch::nn::Module> MakeMlp() { return Mlp().ptr(); }

torch::Tensor Forward(torch::nn::Module& model, const torch::Tensor& input) {
  if (auto* resnet = model.as<ResNet18Impl>()) return resnet->forward(input);
  if (auto* mlp = model.as<MlpImpl>()) return mlp->forward(input);
  throw std::invalid_argument("unknown model");
}

void TrainLoop(const troupe::train::LoopConfig& config) {
  const auto& ctx = troupe::train::GetContext();
  const std::string model_name = Get(config, "model", "resnet18");
  const int epochs = std::stoi(Get(config, "epochs", "1"));
  const int64_t batch_size = std::stoll(Get(config, "batch_size", "128"));
  const double lr = std::stod(Get(config, "lr", "0.001"));
  const bool cosine = Get(config, "lr_schedule", "constant") == "cosine";
  const bool augment = Get(config, "augment", "0") == "1";
  const int64_t limit_batches = std::stoll(Get(config, "limit_batches", "0"));
  const int64_t test_limit = std::stoll(Get(config, "test_limit", "0"));
  const uint64_t seed = std::stoull(Get(config, "seed", "0"));
  const std::string data_dir = Get(config, "data_dir", kDefaultDataDir);
  const std::string events_file = Get(config, "events_file", "");
  const int64_t checkpoint_every = std::stoll(Get(config, "checkpoint_every", "0"));

  torch::manual_seed(seed);
  Split train = Load(data_dir, "train"), test = Load(data_dir, "t10k");
  if (test_limit > 0 && test_limit < test.images.size(0)) {
    test.images = test.images.narrow(0, 0, test_limit);
    test.labels = test.labels.narrow(0, 0, test_limit);
  }
  // The worker's GPU with use_gpu, else the CPU. The data stays in host memory; each batch moves.
  const torch::Device device = troupe::train::torch::WorkerDevice();
  if (ctx.replacement) {  // its rank comes when it joins (PrepareModel)
    std::printf("a replacement worker trains on %s\n", device.str().c_str());
  } else {
    std::printf("rank %d trains on %s\n", ctx.world_rank, device.str().c_str());
  }
  std::fflush(stdout);
  auto model = model_name == "mlp" ? MakeMlp() : MakeResNet18();
  model->to(device);  // before PrepareModel: its buckets live where the gradients do
  if (ctx.replacement) {
    // A model's first forward and backward pass set up what later passes reuse (allocations,
    // kernel choices) and take longer. A replacement makes that pass here, before it announces
    // itself ready, so the members do not wait for it in its first step with them. Nothing of it
    // stays: the gradients are dropped and PrepareModel overwrites the parameters and buffers.
    torch::set_num_threads(std::max(1, ctx.cpus));  // as PrepareModel sets it for the steps
    model->train();
    const int64_t n = std::min<int64_t>(batch_size, train.images.size(0));
    torch::nn::functional::cross_entropy(Forward(*model, train.images.narrow(0, 0, n).to(device)),
                                         train.labels.narrow(0, 0, n).to(device))
        .backward();
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  }
  auto ddp = troupe::train::torch::PrepareModel(model);  // rank 0's weights everywhere
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(lr));

  // Where training resumes: the epoch, the batches of it already done (a checkpoint taken
  // mid-epoch with checkpoint_every), and the steps and samples committed so far.
  int start_epoch = 0;
  int64_t start_batch = 0, step = 0, samples = 0;
  if (auto checkpoint = troupe::train::GetCheckpoint()) {
    torch::serialize::InputArchive archive;
    archive.load_from(*checkpoint + "/model.pt", device);
    model->load(archive);
    torch::serialize::InputArchive optimizer_archive;
    optimizer_archive.load_from(*checkpoint + "/optimizer.pt", device);
    optimizer.load(optimizer_archive);
    std::ifstream(*checkpoint + "/epoch.txt") >> start_epoch;
    std::ifstream(*checkpoint + "/batch.txt") >> start_batch;  // absent: the epoch's start
    std::ifstream(*checkpoint + "/progress.txt") >> step >> samples;
  }
  // This run of the loop (a restart runs it again): the events' "gen".
  const std::string gen = std::to_string(getpid()) + "-" +
                          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
  AppendEvent(events_file, "worker",
              "rank=" + std::to_string(ctx.world_rank) +
                  " world=" + std::to_string(ctx.world_size) + " pid=" + std::to_string(getpid()) +
                  " gen=" + gen);
  // Rank 0 writes the model, the optimizer and where training is into a directory (the others:
  // ""), for Report; `report` removes it once Report packed it, `remove_checkpoint_dir` however
  // the loop ends.
  const std::string checkpoint_prefix = CheckpointDirPrefix(ctx.experiment);
  RemoveCheckpointDirsOfDeadProcesses(checkpoint_prefix);
  const std::string checkpoint_dir = checkpoint_prefix + std::to_string(getpid());
  struct RemoveOnExit {
    const std::string& dir;
    ~RemoveOnExit() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_checkpoint_dir{checkpoint_dir};
  auto report = [&](const troupe::train::Metrics& metrics, const std::string& dir) {
    troupe::train::Report(metrics, dir);
    std::error_code ignored;
    if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
  };
  auto write_checkpoint = [&](int epoch_done, int64_t batch_done) -> std::string {
    if (ctx.world_rank != 0) return "";
    const std::string& dir = checkpoint_dir;
    std::filesystem::create_directories(dir);
    torch::serialize::OutputArchive archive;
    model->save(archive);
    archive.save_to(dir + "/model.pt");
    torch::serialize::OutputArchive optimizer_archive;
    optimizer.save(optimizer_archive);
    optimizer_archive.save_to(dir + "/optimizer.pt");
    std::ofstream(dir + "/epoch.txt") << epoch_done;
    std::ofstream(dir + "/batch.txt") << batch_done;
    std::ofstream(dir + "/progress.txt") << step << " " << samples;
    return dir;
  };

  troupe::train::DistributedSampler sampler(train.images.size(0), ctx.world_rank, ctx.world_size,
                                            /*shuffle=*/true, seed);
  // Elastic runs (--min-workers): members may leave mid-epoch; every sample still once per epoch
  // (docs/train.md, "Elastic training").
  troupe::train::ElasticSampler elastic_sampler(train.images.size(0), batch_size,
                                                /*shuffle=*/true, seed);
  // Runs with --max-workers: replacement workers join at a step boundary; one receives the
  // optimizer's state and the sampler's position here (its model came in PrepareModel).
  ddp->EnableReplacements(optimizer, elastic_sampler);
  if (ctx.replacement) start_epoch = static_cast<int>(elastic_sampler.epoch());
  // The events' "gen": this run of the loop, and in elastic runs the workers' generation.
  auto run_gen = [&] { return ctx.elastic ? gen + "-g" + std::to_string(ctx.generation) : gen; };
  std::mt19937 random(seed * 1000 + ctx.world_rank);
  for (int epoch = start_epoch; epoch < epochs; ++epoch) {
    const double epoch_lr = cosine ? lr * 0.5 * (1 + std::cos(M_PI * epoch / epochs)) : lr;
    for (auto& group : optimizer.param_groups()) {
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(epoch_lr);
    }
    model->train();
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t seen = 0, batches = 0;
    const auto epoch_batches = ctx.elastic
                                   ? std::vector<std::vector<int64_t>>()
                                   : troupe::train::Batches(sampler.Indices(epoch), batch_size);
    const int64_t batches_in_epoch = limit_batches > 0
                                         ? std::min<int64_t>(limit_batches, epoch_batches.size())
                                         : static_cast<int64_t>(epoch_batches.size());
    if (ctx.elastic) elastic_sampler.SetEpoch(epoch);  // a replacement keeps what it received
    // Whether this epoch has steps left after the current one.
    // (Elastic runs count by the sampler, whose position a replacement receives: every member
    // must agree on when to Report.)
    auto more_in_epoch = [&] {
      const int64_t done = ctx.elastic ? elastic_sampler.steps() : batches;
      if (limit_batches > 0 && done >= limit_batches) return false;
      return ctx.elastic ? !elastic_sampler.Done() : batches < batches_in_epoch;
    };
    auto train_step = [&](const std::vector<int64_t>& indices) {
      optimizer.zero_grad();
      if (!indices.empty()) {  // an elastic epoch's last step may leave a rank nothing
        torch::Tensor index = torch::tensor(indices, torch::kInt64);
        torch::Tensor x = train.images.index_select(0, index);
        if (augment) x = Augment(x, random);
        x = x.to(device);
        torch::Tensor y = train.labels.index_select(0, index).to(device);
        torch::Tensor loss = torch::nn::functional::cross_entropy(Forward(*model, x), y);
        loss.backward();
        loss_sum += loss.item<double>() * indices.size();
        seen += indices.size();
      }
      ddp->SynchronizeGradients();
      optimizer.step();
      ++batches;
    };
    // Committed: every rank has the averaged gradients and has stepped.
    auto committed = [&](int64_t step_samples) {
      ++step;
      samples += step_samples;
      if (ctx.world_rank == 0) {
        AppendEvent(events_file, "step",
                    "step=" + std::to_string(step) + " samples=" + std::to_string(samples) +
                        " world=" + std::to_string(ctx.world_size) + " gen=" + run_gen());
      }
      const int64_t at = ctx.elastic ? elastic_sampler.steps() : step;
      if (checkpoint_every > 0 && at % checkpoint_every == 0 && more_in_epoch()) {
        report({{"epoch", epoch}, {"step", static_cast<double>(step)}},
               write_checkpoint(epoch, batches));
      }
    };
    if (ctx.elastic) {
      // The epoch's steps so far come from the sampler (a replacement joins mid-epoch).
      while (!elastic_sampler.Done() &&
             !(limit_batches > 0 && elastic_sampler.steps() >= limit_batches)) {
        if (epoch == start_epoch && batches < start_batch) {     // done before the checkpoint (at
          elastic_sampler.Next(ctx.world_rank, ctx.world_size);  // this world size, as likely)
          elastic_sampler.Commit(std::vector<int>());
          ++batches;
          continue;
        }
        train_step(elastic_sampler.Next());
        elastic_sampler.Commit();
        committed(static_cast<int64_t>(elastic_sampler.last_committed().size()));
      }
    } else {
      for (const auto& indices : epoch_batches) {
        if (limit_batches > 0 && batches >= limit_batches) break;
        if (epoch == start_epoch && batches < start_batch) {  // done before the checkpoint
          ++batches;
          continue;
        }
        train_step(indices);
        committed(static_cast<int64_t>(indices.size()) * ctx.world_size);
      }
    }
    const double train_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    // Test: each rank takes every world_size-th image; sums are combined across ranks.
    model->eval();
    torch::NoGradGuard no_grad;
    double test_loss = 0, correct = 0, tested = 0;
    const int64_t n_test = test.images.size(0);
    for (int64_t begin = ctx.world_rank * 1000; begin < n_test; begin += ctx.world_size * 1000) {
      const int64_t n = std::min<int64_t>(1000, n_test - begin);
      torch::Tensor logits = Forward(*model, test.images.narrow(0, begin, n).to(device));
      torch::Tensor y = test.labels.narrow(0, begin, n).to(device);
      test_loss +=
          torch::nn::functional::cross_entropy(
              logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
              .item<double>();
      correct += logits.argmax(1).eq(y).sum().item<double>();
      tested += n;
    }
    auto sums = troupe::train::torch::SumAcrossWorkers(
        {loss_sum, static_cast<double>(seen), test_loss, correct, tested});
    if (ctx.world_rank == 0) {
      char fields[64];
      std::snprintf(fields, sizeof(fields),
                    "step=%lld accuracy=%.6f gen=", static_cast<long long>(step),
                    sums[3] / std::max(1.0, sums[4]));
      AppendEvent(events_file, "eval", fields + run_gen());
    }

    const std::string epoch_checkpoint = write_checkpoint(epoch + 1, 0);
    troupe::train::Metrics metrics = {{"epoch", epoch + 1},
                                      {"train_loss", sums[0] / std::max(1.0, sums[1])},
                                      {"test_loss", sums[2] / std::max(1.0, sums[4])},
                                      {"accuracy", sums[3] / std::max(1.0, sums[4])},
                                      {"images_per_s", sums[1] / train_seconds},
                                      {"epoch_s", train_seconds},
                                      {"lr", epoch_lr}};
    if (ctx.elastic) metrics["workers"] = ctx.world_size;
    report(metrics, epoch_checkpoint);
  }
}

}  // namespace fashion_mnist

TROUPE_TRAIN_LOOP(fashion_mnist::TrainLoop);
