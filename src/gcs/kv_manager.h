// The GCS's namespaced internal key-value store (what Ray calls internal KV): collective
// rendezvous, runtime metadata and user data live here. Keys of namespace `ns` are stored in the
// "KV" table as "<len(ns)>:<ns><key>", so one namespace's keys never leak into another's prefix
// scans.
//
// Quota: the KV as a whole holds at most KvOptions::quota_bytes (keys and values counted, as
// stored). A write that would take it past the quota fails with ResourceExhausted saying the
// quota, the use and what to do; writes that do not grow the KV (overwrites with a smaller
// value, deletes) always go through. The manager keeps an index of every key and the bytes it
// holds (the manager is the only writer of the "KV" table), so the quota check, Exists, Keys and
// deletes by prefix never read values: listing keys copies no value.
//
// Thread-safe. Writes are applied to the index and handed to the store under one lock, so the
// two see them in the same order; a write the store fails (StoreClient: an acknowledged write
// Redis could not take) is looked up in the store again, so the index keeps agreeing with it.
// `done` runs where the store runs it (possibly before the call returns), never under the manager's
// lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/gcs/store_client.h"

namespace troupe {

struct KvOptions {
  // Bytes (keys and values) the KV may hold in all. Working-directory packages (up to 100 MiB
  // each) and driver executables are the big entries; unreferenced ones are collected
  // (src/gcs/package_collector.h). `troupe start --head --kv-quota` sets it.
  int64_t quota_bytes = int64_t{1} << 30;
};

class KvManager {
 public:
  explicit KvManager(StoreClient* store, KvOptions options = {});

  // Indexes what an earlier GCS saved on the same store (Redis); call once, before serving.
  absl::Status Initialize();

  void Get(const std::string& ns, const std::string& key,
           std::function<void(absl::StatusOr<std::optional<std::string>>)> done);
  // `done` gets true if the key was new. ResourceExhausted past the quota (nothing written).
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

  // Bytes held now (keys and values, as counted against the quota).
  int64_t used_bytes() const;
  // Bytes `key` of `ns` holds (key and value), or nullopt if there is no such key.
  std::optional<int64_t> SizeOf(const std::string& ns, const std::string& key) const;
  int64_t quota_bytes() const { return options_.quota_bytes; }

 private:
  static std::string StoreKey(const std::string& ns, const std::string& key);
  // Makes the index agree with what the store holds for `store_key` (after the store failed a
  // write: a refused one changed nothing, an unacknowledged one is kept). Not under mu_.
  void ResyncIndex(const std::string& store_key) ABSL_LOCKS_EXCLUDED(mu_);

  StoreClient* const store_;
  const KvOptions options_;
  mutable absl::Mutex mu_;
  // Store key -> bytes it holds (key + value). Ordered, for prefix walks.
  std::map<std::string, int64_t> sizes_ ABSL_GUARDED_BY(mu_);
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace troupe
