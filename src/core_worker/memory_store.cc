#include "src/core_worker/memory_store.h"

#include <algorithm>

namespace troupe {

void MemoryStore::Put(const ObjectId& id, StoredObject object) {
  std::list<Waiter> waiters;
  {
    absl::MutexLock lock(&mu_);
    objects_[id] = object;
    if (auto it = waiters_.find(id); it != waiters_.end()) {
      waiters = std::move(it->second);
      waiters_.erase(it);
      timed_waiters_ -= std::count_if(waiters.begin(), waiters.end(),
                                      [](const Waiter& waiter) { return waiter.timed(); });
    }
    ready_.SignalAll();
  }
  for (auto& waiter : waiters) waiter.done(object);
}

std::optional<StoredObject> MemoryStore::GetIfReady(const ObjectId& id) const {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

bool MemoryStore::IsReady(const ObjectId& id) const {
  absl::MutexLock lock(&mu_);
  return objects_.contains(id);
}

std::optional<StoredObject> MemoryStore::Wait(const ObjectId& id, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (!objects_.contains(id)) {
    if (ready_.WaitWithDeadline(&mu_, deadline) && !objects_.contains(id)) return std::nullopt;
  }
  return objects_.at(id);
}

std::vector<bool> MemoryStore::WaitMany(const std::vector<ObjectId>& ids, size_t num_ready,
                                        absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  std::vector<bool> ready(ids.size());
  while (true) {
    size_t count = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      ready[i] = objects_.contains(ids[i]);
      count += ready[i];
    }
    if (count >= std::min(num_ready, ids.size())) return ready;
    if (ready_.WaitWithDeadline(&mu_, deadline)) {
      for (size_t i = 0; i < ids.size(); ++i) ready[i] = objects_.contains(ids[i]);
      return ready;
    }
  }
}

uint64_t MemoryStore::OnReady(const ObjectId& id, absl::Time deadline, ReadyCallback done) {
  std::optional<StoredObject> object;
  uint64_t handle = 0;
  bool timed = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) {
      handle = next_handle_++;
      const Waiter& waiter = waiters_[id].emplace_back(Waiter{handle, deadline, std::move(done)});
      timed = waiter.timed();
      timed_waiters_ += timed;
      next_deadline_ = std::min(next_deadline_, deadline);
    } else {
      object = it->second;
    }
  }
  if (handle != 0) {
    if (timed && timed_waiter_listener_) timed_waiter_listener_();
    return handle;
  }
  done(std::move(object));
  return 0;
}

void MemoryStore::CancelOnReady(const ObjectId& id, uint64_t handle) {
  absl::MutexLock lock(&mu_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  auto& list = it->second;
  auto waiter = std::find_if(list.begin(), list.end(),
                             [handle](const Waiter& waiter) { return waiter.handle == handle; });
  if (waiter == list.end()) return;
  timed_waiters_ -= waiter->timed();
  list.erase(waiter);
  if (list.empty()) waiters_.erase(it);
}

void MemoryStore::ExpireWaiters(absl::Time now) {
  std::vector<ReadyCallback> expired;
  {
    absl::MutexLock lock(&mu_);
    if (now < next_deadline_) return;
    next_deadline_ = absl::InfiniteFuture();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      auto& list = it->second;
      for (auto w = list.begin(); w != list.end();) {
        if (w->deadline <= now) {
          expired.push_back(std::move(w->done));
          timed_waiters_ -= w->timed();
          w = list.erase(w);
        } else {
          next_deadline_ = std::min(next_deadline_, w->deadline);
          ++w;
        }
      }
      if (list.empty()) {
        waiters_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (auto& done : expired) done(std::nullopt);
}

bool MemoryStore::HasTimedWaiters() const {
  absl::MutexLock lock(&mu_);
  return timed_waiters_ > 0;
}

void MemoryStore::AddCopy(const ObjectId& id, const std::string& raylet_address) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  auto& copies = it->second.copy_raylet_addresses;
  if (std::find(copies.begin(), copies.end(), raylet_address) == copies.end()) {
    copies.push_back(raylet_address);
  }
}

void MemoryStore::Erase(const ObjectId& id) {
  absl::MutexLock lock(&mu_);
  objects_.erase(id);
}

size_t MemoryStore::size() const {
  absl::MutexLock lock(&mu_);
  return objects_.size();
}

}  // namespace troupe
