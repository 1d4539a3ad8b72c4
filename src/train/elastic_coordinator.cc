#include "src/train/elastic_coordinator.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_join.h"
#include "src/train/elastic_protocol.h"

namespace troupe::train::internal {

ElasticCoordinator::ElasticCoordinator(int num_workers, int min_workers, Cluster cluster)
    : min_workers_(min_workers), cluster_(std::move(cluster)) {
  for (int w = 0; w < num_workers; ++w) members_.push_back(w);
}

void ElasticCoordinator::Start() {
  generation_ = 1;
  cluster_.declare(generation_, members_, {});
}

bool ElasticCoordinator::IsMember(int worker) const {
  return std::find(members_.begin(), members_.end(), worker) != members_.end();
}

ElasticCoordinator::Verdict ElasticCoordinator::OnFailures(const std::vector<Failure>& failures,
                                                           MembershipEvent* event) {
  // Per leaving worker: what was observed of it (a death beats a peer's report).
  std::map<int, const Failure*> leaving;
  for (const Failure& failure : failures) {
    int worker = failure.worker;
    if (worker < 0) {
      if (failure.generation != generation_) continue;  // about an earlier generation: stale
      if (failure.rank < 0 || failure.rank >= static_cast<int>(members_.size())) continue;
      worker = members_[failure.rank];
    }
    if (!IsMember(worker)) continue;  // excluded already
    auto [it, inserted] = leaving.emplace(worker, &failure);
    if (!inserted && failure.worker >= 0) it->second = &failure;
  }
  if (leaving.empty()) return Verdict::kUnchanged;

  std::vector<int> left_ranks;
  std::vector<std::string> whys;
  *event = MembershipEvent();
  event->change = "left";
  for (size_t rank = 0; rank < members_.size(); ++rank) {
    auto it = leaving.find(members_[rank]);
    if (it == leaving.end()) continue;
    const Failure& failure = *it->second;
    left_ranks.push_back(static_cast<int>(rank));
    if (std::find(whys.begin(), whys.end(), failure.why) == whys.end()) whys.push_back(failure.why);
    if (event->detail.empty()) event->detail = failure.detail;
    if (failure.step >= 0 && (event->step < 0 || failure.step < event->step)) {
      event->step = failure.step;
    }
    if (failure.time_ms > 0 && (event->time_ms == 0 || failure.time_ms < event->time_ms)) {
      event->time_ms = failure.time_ms;
    }
  }
  event->why = absl::StrJoin(whys, ",");
  event->ranks = left_ranks;
  for (const auto& [worker, failure] : leaving) {
    excluded_.insert(worker);
    cluster_.kill(worker);  // fencing: whatever state it is in, it must not come back
  }
  members_ = WithoutRanks(members_, left_ranks);
  event->world_size = static_cast<int>(members_.size());
  if (static_cast<int>(members_.size()) < min_workers_) {
    event->change = "restart";
    return Verdict::kBelowMinimum;
  }
  event->generation = ++generation_;
  cluster_.declare(generation_, members_, left_ranks);
  return Verdict::kContinue;
}

}  // namespace troupe::train::internal
