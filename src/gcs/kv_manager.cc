#include "src/gcs/kv_manager.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace troupe {
namespace {
constexpr char kTable[] = "KV";

absl::Status CheckKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("KV key must not be empty");
  return absl::OkStatus();
}
}  // namespace

std::string KvManager::StoreKey(const std::string& ns, const std::string& key) {
  return absl::StrCat(ns.size(), ":", ns, key);
}

void KvManager::Get(const std::string& ns, const std::string& key,
                    std::function<void(absl::StatusOr<std::optional<std::string>>)> done) {
  if (auto status = CheckKey(key); !status.ok()) return done(status);
  store_->AsyncGet(kTable, StoreKey(ns, key), std::move(done));
}

void KvManager::Put(const std::string& ns, const std::string& key, std::string value,
                    bool overwrite, std::function<void(absl::StatusOr<bool>)> done) {
  if (auto status = CheckKey(key); !status.ok()) return done(status);
  store_->AsyncPut(kTable, StoreKey(ns, key), std::move(value), overwrite, std::move(done));
}

void KvManager::Del(const std::string& ns, const std::string& key, bool by_prefix,
                    std::function<void(absl::StatusOr<int64_t>)> done) {
  if (!by_prefix) {
    if (auto status = CheckKey(key); !status.ok()) return done(status);
    store_->AsyncDelete(kTable, StoreKey(ns, key), std::move(done));
    return;
  }
  store_->AsyncScan(kTable, StoreKey(ns, key),
                    [this, done = std::move(done)](absl::StatusOr<StoreClient::Rows> rows) {
                      if (!rows.ok()) return done(rows.status());
                      if (rows->empty()) return done(0);
                      // Count the deletes as they complete; answer once all have (with the
                      // first error, if the store refused or did not acknowledge one).
                      struct Pending {
                        std::atomic<size_t> remaining;
                        std::atomic<int64_t> deleted{0};
                        absl::Mutex mu;
                        absl::Status error ABSL_GUARDED_BY(mu);
                        std::function<void(absl::StatusOr<int64_t>)> done;
                      };
                      auto pending = std::make_shared<Pending>();
                      pending->remaining = rows->size();
                      pending->done = done;
                      for (const auto& row : *rows) {
                        store_->AsyncDelete(kTable, row.first,
                                            [pending](absl::StatusOr<int64_t> n) {
                                              if (n.ok()) {
                                                pending->deleted += *n;
                                              } else {
                                                absl::MutexLock lock(&pending->mu);
                                                if (pending->error.ok()) {
                                                  pending->error = n.status();
                                                }
                                              }
                                              if (--pending->remaining > 0) return;
                                              absl::Status error;
                                              {
                                                absl::MutexLock lock(&pending->mu);
                                                error = pending->error;
                                              }
                                              if (!error.ok()) return pending->done(error);
                                              pending->done(pending->deleted.load());
                                            });
                      }
                    });
}

void KvManager::Exists(const std::string& ns, const std::string& key,
                       std::function<void(absl::StatusOr<bool>)> done) {
  Get(ns, key, [done = std::move(done)](absl::StatusOr<std::optional<std::string>> value) {
    if (!value.ok()) return done(value.status());
    done(value->has_value());
  });
}

void KvManager::Keys(const std::string& ns, const std::string& prefix,
                     std::function<void(absl::StatusOr<std::vector<std::string>>)> done) {
  const size_t strip = StoreKey(ns, "").size();
  store_->AsyncScan(kTable, StoreKey(ns, prefix),
                    [strip, done = std::move(done)](absl::StatusOr<StoreClient::Rows> rows) {
                      if (!rows.ok()) return done(rows.status());
                      std::vector<std::string> keys;
                      keys.reserve(rows->size());
                      for (const auto& row : *rows) keys.push_back(row.first.substr(strip));
                      std::sort(keys.begin(), keys.end());
                      done(std::move(keys));
                    });
}

}  // namespace troupe
