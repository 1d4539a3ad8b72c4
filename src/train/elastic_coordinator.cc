#include "src/train/elastic_coordinator.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_join.h"
#include "src/train/elastic_protocol.h"

namespace troupe::train::internal {

ElasticCoordinator::ElasticCoordinator(int num_workers, int min_workers, int max_workers,
                                       Cluster cluster)
    : min_workers_(min_workers), max_workers_(max_workers), cluster_(std::move(cluster)) {
  for (int w = 0; w < num_workers; ++w) members_.push_back(w);
}

void ElasticCoordinator::Start() {
  generation_ = 1;
  cluster_.declare(generation_, members_, {}, {});
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
    if (!IsMember(worker)) {
      // A replacement that died before it joined: withdrawn (it was never a member).
      if (failure.worker >= 0) {
        waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), worker), waiting_.end());
        ready_.erase(worker);
      }
      continue;  // else excluded already
    }
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
  cluster_.declare(generation_, members_, left_ranks, {});
  ProposeIfReady();  // a proposal to the previous generation is void: make it to this one
  return Verdict::kContinue;
}

int ElasticCoordinator::Vacancies() const {
  if (max_workers_ <= 0) return 0;
  return std::max(0, max_workers_ - static_cast<int>(members_.size() + waiting_.size()));
}

void ElasticCoordinator::OnReplacementStarted(int worker) { waiting_.push_back(worker); }

void ElasticCoordinator::OnReady(int worker, int64_t time_ms) {
  if (std::find(waiting_.begin(), waiting_.end(), worker) == waiting_.end()) return;
  ready_.emplace(worker, time_ms);
  ProposeIfReady();
}

void ElasticCoordinator::ProposeIfReady() {
  if (ready_.empty() || proposed_ == generation_ || generation_ == 0) return;
  proposed_ = generation_;
  cluster_.propose(generation_);
}

ElasticCoordinator::Verdict ElasticCoordinator::OnBoundary(int64_t generation, int64_t step,
                                                           MembershipEvent* event) {
  if (generation != generation_ || proposed_ != generation_) return Verdict::kUnchanged;
  proposed_ = 0;
  std::vector<int> joined;
  int64_t asked_ms = 0;
  for (int worker : waiting_) {  // in the order started
    auto it = ready_.find(worker);
    if (it == ready_.end()) continue;
    joined.push_back(worker);
    if (asked_ms == 0 || it->second < asked_ms) asked_ms = it->second;
  }
  std::vector<int> ranks;
  for (int worker : joined) {
    ranks.push_back(static_cast<int>(members_.size()));
    members_.push_back(worker);
    ready_.erase(worker);
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), worker), waiting_.end());
  }
  ++generation_;
  cluster_.declare(generation_, members_, {}, joined);
  if (joined.empty()) return Verdict::kUnchanged;  // they withdrew: the members just go on
  *event = MembershipEvent();
  event->generation = generation_;
  event->change = "joined";
  event->why = "replacement";
  event->ranks = ranks;
  event->world_size = static_cast<int>(members_.size());
  event->step = step;
  event->time_ms = asked_ms;
  return Verdict::kJoined;
}

}  // namespace troupe::train::internal
