// The driver's checkpoints of one run: directories storage_path/name/checkpoint_<n>, written from
// packages that workers send, and pruned to the best `num_to_keep` by a metric (the newest is
// always kept: training resumes from it). Not thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "troupe/train.h"

namespace troupe::train {

class CheckpointStore {
 public:
  // `dir`: storage_path/name (created on first Add).
  CheckpointStore(std::string dir, CheckpointConfig config);

  // Unpacks a worker's checkpoint package as the next checkpoint; returns its path.
  absl::StatusOr<std::string> Add(const std::string& package, const Metrics& metrics);
  std::optional<Checkpoint> Latest() const;
  std::optional<Checkpoint> Best() const;
  const std::vector<Checkpoint>& kept() const { return kept_; }

 private:
  bool Better(const Checkpoint& a, const Checkpoint& b) const;  // a ranks above b
  void Prune();

  std::string dir_;
  CheckpointConfig config_;
  int next_index_ = 1;
  std::vector<Checkpoint> kept_;  // in creation order
};

// "~/x" → "$HOME/x".
std::string ExpandHome(const std::string& path);

}  // namespace troupe::train
