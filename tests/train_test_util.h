// Helpers shared by the train tests' files (//tests:train_test: train_test.cc and
// train_elastic_test.cc, one binary): loop configuration, model checksums, temp dirs, and the
// elastic loop's sample logs. Plain functions; used by one test thread at a time.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "troupe/train.h"

namespace train_test {

namespace train = troupe::train;

inline std::string Get(const train::LoopConfig& config, const std::string& key) {
  auto it = config.find(key);
  return it == config.end() ? "" : it->second;
}

// Sum of every parameter: equal on all ranks iff they hold the same model (practically).
inline double Checksum(torch::nn::Module& model) {
  double sum = 0;
  for (const auto& p : model.parameters())
    sum += p.detach().to(torch::kFloat64).sum().item<double>();
  return sum;
}

inline void SaveCheckpoint(torch::nn::Module& model, int epoch, const std::string& dir) {
  std::filesystem::create_directories(dir);
  torch::serialize::OutputArchive archive;
  model.save(archive);
  archive.save_to(dir + "/model.pt");
  std::ofstream(dir + "/epoch.txt") << epoch;
}

inline std::string TempDir(const std::string& name) {
  std::string dir = absl::StrCat(testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline train::LoopConfig ElasticConfig(int epochs, const std::string& pids,
                                       const std::string& samples) {
  return {{"epochs", std::to_string(epochs)},
          {"samples", "512"},
          {"pid_dir", pids},
          {"samples_dir", samples}};
}

// How often each sample was committed, per epoch, by one member's log (ElasticLoop).
inline std::map<int, std::map<int64_t, int>> CommittedSamples(const std::string& path) {
  std::map<int, std::map<int64_t, int>> counts;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int epoch;
    int64_t generation, sample;
    fields >> epoch >> generation;
    while (fields >> sample) ++counts[epoch][sample];
  }
  return counts;
}

inline int ReadPid(const std::string& path) {
  int pid = 0;
  std::ifstream(path) >> pid;
  return pid;
}

// The first line of a file ("" when it cannot be read).
inline std::string ReadText(const std::string& path) {
  std::string line;
  std::ifstream in(path);
  std::getline(in, line);
  return line;
}

}  // namespace train_test
