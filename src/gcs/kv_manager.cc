#include "src/gcs/kv_manager.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/resources.h"

namespace troupe {
namespace {
constexpr char kTable[] = "KV";

absl::Status CheckKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("KV key must not be empty");
  return absl::OkStatus();
}

// Holds a store callback that runs before the store call returns (the in-memory store does so)
// until Release(), so the caller's `done` never runs under the manager's lock; one that runs
// later goes straight through.
template <typename T>
class HeldCallback : public std::enable_shared_from_this<HeldCallback<T>> {
 public:
  explicit HeldCallback(std::function<void(absl::StatusOr<T>)> done) : done_(std::move(done)) {}

  std::function<void(absl::StatusOr<T>)> Wrapped() {
    return [self = this->shared_from_this()](absl::StatusOr<T> result) {
      {
        absl::MutexLock lock(&self->mu_);
        if (!self->released_) {
          self->result_ = std::move(result);
          return;
        }
      }
      if (self->done_) self->done_(std::move(result));
    };
  }
  // Call once the manager's lock is released.
  void Release() {
    std::optional<absl::StatusOr<T>> result;
    {
      absl::MutexLock lock(&mu_);
      released_ = true;
      result = std::move(result_);
    }
    if (result.has_value() && done_) done_(*std::move(result));
  }

 private:
  std::function<void(absl::StatusOr<T>)> done_;
  absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::StatusOr<T>> result_ ABSL_GUARDED_BY(mu_);
};

template <typename T>
std::shared_ptr<HeldCallback<T>> Hold(std::function<void(absl::StatusOr<T>)> done) {
  return std::make_shared<HeldCallback<T>>(std::move(done));
}

}  // namespace

KvManager::KvManager(StoreClient* store, KvOptions options)
    : store_(store), options_(std::move(options)) {}

std::string KvManager::StoreKey(const std::string& ns, const std::string& key) {
  return absl::StrCat(ns.size(), ":", ns, key);
}

absl::Status KvManager::Initialize() {
  auto rows = ScanTableSync(store_, kTable);
  if (!rows.ok()) return rows.status();
  absl::MutexLock lock(&mu_);
  sizes_.clear();
  used_ = 0;
  for (const auto& [key, value] : *rows) {
    const int64_t bytes = static_cast<int64_t>(key.size() + value.size());
    sizes_[key] = bytes;
    used_ += bytes;
  }
  return absl::OkStatus();
}

void KvManager::Get(const std::string& ns, const std::string& key,
                    std::function<void(absl::StatusOr<std::optional<std::string>>)> done) {
  if (auto status = CheckKey(key); !status.ok()) return done(status);
  store_->AsyncGet(kTable, StoreKey(ns, key), std::move(done));
}

void KvManager::ResyncIndex(const std::string& store_key) {
  store_->AsyncGet(
      kTable, store_key, [this, store_key](absl::StatusOr<std::optional<std::string>> value) {
        if (!value.ok()) return;
        absl::MutexLock lock(&mu_);
        auto it = sizes_.find(store_key);
        const int64_t old = it == sizes_.end() ? 0 : it->second;
        if (value->has_value()) {
          const int64_t bytes = static_cast<int64_t>(store_key.size() + (*value)->size());
          sizes_[store_key] = bytes;
          used_ += bytes - old;
        } else if (it != sizes_.end()) {
          used_ -= old;
          sizes_.erase(it);
        }
      });
}

void KvManager::Put(const std::string& ns, const std::string& key, std::string value,
                    bool overwrite, std::function<void(absl::StatusOr<bool>)> done) {
  if (auto status = CheckKey(key); !status.ok()) return done(status);
  std::string store_key = StoreKey(ns, key);
  const int64_t bytes = static_cast<int64_t>(store_key.size() + value.size());
  absl::Status refused;
  bool unchanged = false;
  // A write the store failed (Redis unreachable: refused, nothing changed; or not acknowledged,
  // kept): the index follows what the store holds, so Exists, Keys and a retry tell the truth.
  auto held = Hold(std::function<void(absl::StatusOr<bool>)>(
      [this, store_key, done = std::move(done)](absl::StatusOr<bool> result) {
        if (!result.ok() && !absl::IsResourceExhausted(result.status())) ResyncIndex(store_key);
        if (done) done(std::move(result));
      }));
  {
    absl::MutexLock lock(&mu_);
    auto it = sizes_.find(store_key);
    const int64_t old = it == sizes_.end() ? 0 : it->second;
    if (it != sizes_.end() && !overwrite) {
      unchanged = true;
    } else if (bytes > old && used_ - old + bytes > options_.quota_bytes) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "the GCS key-value store is over its quota: writing key '", key.substr(0, 200),
          "' of namespace '", ns, "' (", FormatBytes(bytes), ") would bring it to ",
          FormatBytes(used_ - old + bytes), " of its ", FormatBytes(options_.quota_bytes),
          " quota (", FormatBytes(used_),
          " in use now). Delete keys you no longer need (finished jobs' working-directory "
          "packages are collected after a grace period), or start the head with a larger "
          "--kv-quota"));
    } else {
      sizes_[store_key] = bytes;
      used_ += bytes - old;
      store_->AsyncPut(kTable, store_key, std::move(value), overwrite, held->Wrapped());
    }
  }
  if (unchanged) {
    held->Wrapped()(false);
  } else if (!refused.ok()) {
    held->Wrapped()(refused);
  }
  held->Release();
}

void KvManager::Del(const std::string& ns, const std::string& key, bool by_prefix,
                    std::function<void(absl::StatusOr<int64_t>)> done) {
  if (!by_prefix) {
    if (auto status = CheckKey(key); !status.ok()) return done(status);
  }
  const std::string store_key = StoreKey(ns, key);
  // Count the deletes as they complete; answer once all have.
  struct Pending {
    std::atomic<size_t> remaining{1};  // one for the issuing below
    std::atomic<int64_t> deleted{0};
    std::optional<absl::Status> error;  // the first failure (written before `remaining` drops)
    std::vector<std::string> failed ABSL_GUARDED_BY(mu);  // keys whose delete the store failed
    absl::Mutex mu;
  };
  auto pending = std::make_shared<Pending>();
  auto held = Hold(std::move(done));
  // The last one runs without the manager's lock (the issuing below is counted and finished
  // after the lock is released), so it may resync the index for deletes the store failed.
  auto finish = [this, pending, answer = held->Wrapped()](const std::string& doomed_key,
                                                          absl::StatusOr<int64_t> n) {
    if (n.ok()) {
      pending->deleted += *n;
    } else {
      absl::MutexLock lock(&pending->mu);
      if (!pending->error) pending->error = n.status();
      pending->failed.push_back(doomed_key);
    }
    if (--pending->remaining == 0) {
      std::optional<absl::Status> error;
      std::vector<std::string> failed;
      {
        absl::MutexLock lock(&pending->mu);
        error = pending->error;
        failed = pending->failed;
      }
      for (const std::string& failed_key : failed) ResyncIndex(failed_key);
      if (error) return answer(*error);
      answer(pending->deleted.load());
    }
  };
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> doomed;
    for (auto it = sizes_.lower_bound(store_key);
         it != sizes_.end() &&
         (by_prefix ? absl::StartsWith(it->first, store_key) : it->first == store_key);
         ++it) {
      doomed.push_back(it->first);
    }
    pending->remaining += doomed.size();
    for (const std::string& doomed_key : doomed) {
      auto it = sizes_.find(doomed_key);
      used_ -= it->second;
      sizes_.erase(it);
      store_->AsyncDelete(kTable, doomed_key, [finish, doomed_key](absl::StatusOr<int64_t> n) {
        finish(doomed_key, std::move(n));
      });
    }
  }
  finish("", int64_t{0});  // the issuing is done
  held->Release();
}

void KvManager::Exists(const std::string& ns, const std::string& key,
                       std::function<void(absl::StatusOr<bool>)> done) {
  if (auto status = CheckKey(key); !status.ok()) return done(status);
  bool exists;
  {
    absl::MutexLock lock(&mu_);
    exists = sizes_.count(StoreKey(ns, key)) > 0;
  }
  done(exists);
}

void KvManager::Keys(const std::string& ns, const std::string& prefix,
                     std::function<void(absl::StatusOr<std::vector<std::string>>)> done) {
  const size_t strip = StoreKey(ns, "").size();
  const std::string store_prefix = StoreKey(ns, prefix);
  std::vector<std::string> keys;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = sizes_.lower_bound(store_prefix);
         it != sizes_.end() && absl::StartsWith(it->first, store_prefix); ++it) {
      keys.push_back(it->first.substr(strip));  // sorted: the index is ordered
    }
  }
  done(std::move(keys));
}

int64_t KvManager::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

std::optional<int64_t> KvManager::SizeOf(const std::string& ns, const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = sizes_.find(StoreKey(ns, key));
  if (it == sizes_.end()) return std::nullopt;
  return it->second;
}

}  // namespace troupe
