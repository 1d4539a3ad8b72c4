// StoreClient kept in this process's memory: the default for an embedded or single-head cluster.
// State is lost when the GCS exits. Thread-safe; callbacks run on the calling thread, after the
// internal lock is released.
#pragma once

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "src/gcs/store_client.h"

namespace troupe {

class InMemoryStoreClient : public StoreClient {
 public:
  void AsyncPut(const std::string& table, const std::string& key, std::string value, bool overwrite,
                std::function<void(absl::StatusOr<bool>)> done) override;
  void AsyncGet(const std::string& table, const std::string& key,
                std::function<void(absl::StatusOr<std::optional<std::string>>)> done) override;
  void AsyncDelete(const std::string& table, const std::string& key,
                   std::function<void(absl::StatusOr<int64_t>)> done) override;
  void AsyncScan(const std::string& table, const std::string& prefix,
                 std::function<void(absl::StatusOr<Rows>)> done) override;

 private:
  absl::Mutex mu_;
  // Ordered per table so prefix scans are a range walk.
  std::map<std::string, std::map<std::string, std::string>> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe
