// Context for docs/train.md's snippets (tests/doc_snippets_test.py): the model, data and
// checkpoint helpers a training program brings itself. Declarations only: the snippets are
// compiled, not linked.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

std::shared_ptr<torch::nn::Module> MakeModel();
torch::Tensor Loss(torch::nn::Module& model, const std::vector<int64_t>& batch);
double Accuracy(torch::nn::Module& model);
int LoadFrom(const std::string& checkpoint_dir);
std::string SaveCheckpointSomewhere();
inline constexpr int64_t dataset_size = 60000;
inline constexpr int epochs = 3;
