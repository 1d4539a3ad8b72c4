#include "src/core_worker/reference_counter.h"

namespace troupe {

ReferenceCounter::ReferenceCounter(FreeCallback on_owned_free, ReleaseCallback on_borrowed_release)
    : on_owned_free_(std::move(on_owned_free)),
      on_borrowed_release_(std::move(on_borrowed_release)) {}

std::function<void()> ReferenceCounter::MaybeReleaseLocked(const ObjectId& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return nullptr;
  Entry& entry = it->second;
  if (entry.local > 0 || entry.submitted > 0 || !entry.borrowers.empty()) return nullptr;
  std::function<void()> callback;
  if (entry.owner_address == self_address_) {
    callback = [this, id, contained = std::move(entry.contained)]() mutable {
      on_owned_free_(id, std::move(contained));
    };
  } else {
    callback = [this, id, owner = entry.owner_address, reported = entry.reported] {
      on_borrowed_release_(id, owner, reported);
    };
  }
  entries_.erase(it);
  return callback;
}

void ReferenceCounter::AddLocal(const ObjectRefInfo& ref) {
  absl::MutexLock lock(&mu_);
  Entry& entry = entries_[ref.id];
  if (entry.owner_address.empty()) entry.owner_address = ref.owner_address;
  entry.local++;
}

void ReferenceCounter::RemoveLocal(const ObjectId& id) {
  std::function<void()> callback;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.local == 0) return;
    it->second.local--;
    callback = MaybeReleaseLocked(id);
  }
  if (callback) callback();
}

void ReferenceCounter::AddSubmitted(const ObjectRefInfo& ref) {
  absl::MutexLock lock(&mu_);
  Entry& entry = entries_[ref.id];
  if (entry.owner_address.empty()) entry.owner_address = ref.owner_address;
  entry.submitted++;
}

void ReferenceCounter::RemoveSubmitted(const ObjectId& id) {
  std::function<void()> callback;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.submitted == 0) return;
    it->second.submitted--;
    callback = MaybeReleaseLocked(id);
  }
  if (callback) callback();
}

void ReferenceCounter::AddBorrower(const ObjectId& id, const std::string& borrower) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;  // already freed; the borrower will find it gone
  it->second.borrowers.insert(borrower);
}

void ReferenceCounter::RemoveBorrower(const ObjectId& id, const std::string& borrower) {
  std::function<void()> callback;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    it->second.borrowers.erase(borrower);
    callback = MaybeReleaseLocked(id);
  }
  if (callback) callback();
}

void ReferenceCounter::SetContained(const ObjectId& outer, std::vector<ObjectRefInfo> contained) {
  // The inner references are taken as local references of ours, released with the outer.
  for (const auto& inner : contained) AddLocal(inner);
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(outer);
  if (it == entries_.end()) return;
  it->second.contained = std::move(contained);
}

void ReferenceCounter::SetContainedFromReturn(const ObjectId& outer,
                                              std::vector<ObjectRefInfo> contained) {
  std::vector<std::function<void()>> callbacks;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& inner : contained) {
      Entry& entry = entries_[inner.id];
      if (entry.owner_address.empty()) entry.owner_address = inner.owner_address;
      entry.local++;
      if (entry.owner_address != self_address_) entry.reported = true;
    }
    auto it = entries_.find(outer);
    if (it != entries_.end()) {
      for (auto& inner : contained) it->second.contained.push_back(std::move(inner));
    } else {
      for (const auto& inner : contained) {
        entries_[inner.id].local--;
        if (auto callback = MaybeReleaseLocked(inner.id)) callbacks.push_back(std::move(callback));
      }
    }
  }
  for (auto& callback : callbacks) callback();
}

std::vector<ObjectRefInfo> ReferenceCounter::TakeUnreportedBorrows() {
  absl::MutexLock lock(&mu_);
  std::vector<ObjectRefInfo> out;
  for (auto& [id, entry] : entries_) {
    if (entry.owner_address != self_address_ && !entry.reported && entry.local > 0) {
      entry.reported = true;
      out.push_back({id, entry.owner_address});
    }
  }
  return out;
}

bool ReferenceCounter::IsTracked(const ObjectId& id) const {
  absl::MutexLock lock(&mu_);
  return entries_.contains(id);
}

bool ReferenceCounter::IsOwnedHere(const ObjectId& id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.owner_address == self_address_;
}

size_t ReferenceCounter::num_tracked() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace troupe
