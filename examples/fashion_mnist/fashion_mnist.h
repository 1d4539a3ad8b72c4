// FashionMNIST for the training examples: the real IDX files (gzip) from Debian's
// dataset-fashion-mnist, the models (torchvision-style ResNet18 adapted to 1 channel, and a small
// MLP), and the data-parallel train loop both examples run.
#pragma once

#include <torch/torch.h>

#include <string>

#include "troupe/train.h"

namespace fashion_mnist {

inline constexpr char kDefaultDataDir[] = "/usr/share/datasets/fashion-mnist";
inline constexpr double kMean = 0.28604, kStd = 0.32025;

struct Split {
  torch::Tensor images;  // [N, 1, 28, 28] float, normalised
  torch::Tensor labels;  // [N] int64
};

// Reads `<dir>/<prefix>-images-idx3-ubyte.gz` and `-labels-idx1-ubyte.gz` (prefix "train" or
// "t10k"). Throws std::runtime_error naming the file and what is wrong.
Split Load(const std::string& dir, const std::string& prefix);

// torchvision's resnet18 with conv1 = Conv2d(1, 64, 7, stride 2, padding 3, no bias) and 10
// classes (the model of Ray Train's getting-started guide).
std::shared_ptr<torch::nn::Module> MakeResNet18();
std::shared_ptr<torch::nn::Module> MakeMlp();  // 784-512-512-10
torch::Tensor Forward(torch::nn::Module& model, const torch::Tensor& input);

// The train loop (registered as fashion_mnist::TrainLoop). It trains and evaluates on the
// worker's device (troupe::train::torch::WorkerDevice(): its GPU with use_gpu, else the CPU),
// moving each batch there from host memory. Config keys (strings): model
// (resnet18|mlp), epochs, batch_size (per worker), lr, lr_schedule (constant|cosine), augment
// (0|1: random 28x28 crop of the image padded by 2, random horizontal flip), limit_batches
// (per epoch, 0: all), test_limit (test images, 0: all), data_dir, seed, checkpoint_every
// (0: a checkpoint at each epoch's end only; N: also every N steps within an epoch, and a restart
// resumes at the step after it), events_file ("" : none; else every rank appends
// "worker t=<unix s> rank= world= pid= gen=" when it starts, rank 0 "step t= step= samples=
// world= gen=" per committed step and "eval t= step= accuracy= gen=" per evaluation, where gen
// names this run of the loop (it must change whenever the group that commits steps changes):
// bench/elastic_bench.py reads them). In elastic runs (Context::elastic) batches come from an
// ElasticSampler and each report adds "workers".
void TrainLoop(const troupe::train::LoopConfig& config);

}  // namespace fashion_mnist
