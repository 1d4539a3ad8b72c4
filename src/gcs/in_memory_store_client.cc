#include "src/gcs/in_memory_store_client.h"

#include "absl/strings/match.h"

namespace troupe {

void InMemoryStoreClient::AsyncPut(const std::string& table, const std::string& key,
                                   std::string value, bool overwrite,
                                   std::function<void(absl::StatusOr<bool>)> done) {
  bool added;
  {
    absl::MutexLock lock(&mu_);
    auto& rows = tables_[table];
    auto it = rows.find(key);
    added = it == rows.end();
    if (added) {
      rows.emplace(key, std::move(value));
    } else if (overwrite) {
      it->second = std::move(value);
    }
  }
  if (done) done(added);
}

void InMemoryStoreClient::AsyncGet(
    const std::string& table, const std::string& key,
    std::function<void(absl::StatusOr<std::optional<std::string>>)> done) {
  std::optional<std::string> value;
  {
    absl::MutexLock lock(&mu_);
    auto table_it = tables_.find(table);
    if (table_it != tables_.end()) {
      auto it = table_it->second.find(key);
      if (it != table_it->second.end()) value = it->second;
    }
  }
  done(std::move(value));
}

void InMemoryStoreClient::AsyncDelete(const std::string& table, const std::string& key,
                                      std::function<void(absl::StatusOr<int64_t>)> done) {
  int64_t deleted = 0;
  {
    absl::MutexLock lock(&mu_);
    auto table_it = tables_.find(table);
    if (table_it != tables_.end()) deleted = table_it->second.erase(key);
  }
  if (done) done(deleted);
}

void InMemoryStoreClient::AsyncScan(const std::string& table, const std::string& prefix,
                                    std::function<void(absl::StatusOr<Rows>)> done) {
  Rows rows;
  {
    absl::MutexLock lock(&mu_);
    auto table_it = tables_.find(table);
    if (table_it != tables_.end()) {
      for (auto it = table_it->second.lower_bound(prefix);
           it != table_it->second.end() && absl::StartsWith(it->first, prefix); ++it) {
        rows.emplace(it->first, it->second);
      }
    }
  }
  done(std::move(rows));
}

}  // namespace troupe
