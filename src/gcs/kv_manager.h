// The GCS's namespaced internal key-value store (what Ray calls internal KV): collective
// rendezvous, runtime metadata and user data live here. Keys of namespace `ns` are stored in the
// "KV" table as "<len(ns)>:<ns><key>", so one namespace's keys never leak into another's prefix
// scans. Thread-safe (stateless over a thread-safe store); callbacks run where the store runs them.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/gcs/store_client.h"

namespace troupe {

class KvManager {
 public:
  explicit KvManager(StoreClient* store) : store_(store) {}

  void Get(const std::string& ns, const std::string& key,
           std::function<void(absl::StatusOr<std::optional<std::string>>)> done);
  // `done` gets true if the key was new.
  void Put(const std::string& ns, const std::string& key, std::string value, bool overwrite,
           std::function<void(absl::StatusOr<bool>)> done);
  // Deletes `key`, or every key starting with it when `by_prefix`; `done` gets the count.
  void Del(const std::string& ns, const std::string& key, bool by_prefix,
           std::function<void(absl::StatusOr<int64_t>)> done);
  void Exists(const std::string& ns, const std::string& key,
              std::function<void(absl::StatusOr<bool>)> done);
  // Keys of `ns` starting with `prefix`, sorted.
  void Keys(const std::string& ns, const std::string& prefix,
            std::function<void(absl::StatusOr<std::vector<std::string>>)> done);

 private:
  static std::string StoreKey(const std::string& ns, const std::string& key);

  StoreClient* store_;
};

}  // namespace troupe
