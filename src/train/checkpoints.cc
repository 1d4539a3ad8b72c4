#include "src/train/checkpoints.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "src/common/package.h"

namespace troupe::train {

std::string ExpandHome(const std::string& path) {
  const char* home = std::getenv("HOME");
  if (path.rfind("~/", 0) == 0 && home != nullptr) return std::string(home) + path.substr(1);
  return path;
}

CheckpointStore::CheckpointStore(std::string dir, CheckpointConfig config)
    : dir_(std::move(dir)), config_(std::move(config)) {}

absl::StatusOr<std::string> CheckpointStore::Add(const std::string& package,
                                                 const Metrics& metrics) {
  const std::string path = absl::StrFormat("%s/checkpoint_%06d", dir_, next_index_++);
  std::error_code error;
  std::filesystem::remove_all(path, error);  // a leftover of an earlier run under the same name
  if (auto status = UnpackDirectory(package, path, PackageLimits::Checkpoint()); !status.ok())
    return status;
  kept_.push_back({path, metrics});
  Prune();
  return path;
}

bool CheckpointStore::Better(const Checkpoint& a, const Checkpoint& b) const {
  const std::string& key = config_.score_attribute;
  if (key.empty()) return false;  // newest wins, decided by position
  auto a_score = a.metrics.find(key), b_score = b.metrics.find(key);
  if (a_score == a.metrics.end()) return false;
  if (b_score == b.metrics.end()) return true;
  return config_.score_order == "min" ? a_score->second < b_score->second
                                      : a_score->second > b_score->second;
}

std::optional<Checkpoint> CheckpointStore::Latest() const {
  if (kept_.empty()) return std::nullopt;
  return kept_.back();
}

std::optional<Checkpoint> CheckpointStore::Best() const {
  if (kept_.empty()) return std::nullopt;
  if (config_.score_attribute.empty()) return kept_.back();
  const Checkpoint* best = &kept_.front();
  for (const Checkpoint& c : kept_) {
    if (Better(c, *best)) best = &c;
  }
  return *best;
}

void CheckpointStore::Prune() {
  if (config_.num_to_keep <= 0) return;
  while (static_cast<int>(kept_.size()) > config_.num_to_keep) {
    // Drop the worst one that is not the newest (the newest is where a restart resumes).
    size_t worst = 0;
    for (size_t i = 1; i + 1 < kept_.size(); ++i) {
      const bool worse = config_.score_attribute.empty() ? false : Better(kept_[worst], kept_[i]);
      if (worse) worst = i;
    }
    if (kept_.size() == 1) return;
    std::error_code error;
    std::filesystem::remove_all(kept_[worst].path, error);
    kept_.erase(kept_.begin() + worst);
  }
}

}  // namespace troupe::train
