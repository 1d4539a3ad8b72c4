// Where the GCS keeps its tables. Table-shaped (put/get/delete/scan per table) and asynchronous,
// so the in-memory store (the embedded default) and a Redis store can stand behind it alike.
// Implementations are thread-safe; callbacks may run on the calling thread (in-memory) or on the
// store's own thread (Redis), and must not be assumed to run after the call returns.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace troupe {

class StoreClient {
 public:
  using Rows = absl::flat_hash_map<std::string, std::string>;

  virtual ~StoreClient() = default;

  // Writes: with a `done` callback a write is *acknowledged*: `done` gets OK only once the write
  // is durable in the store; a store that cannot make it durable now (Redis unreachable) answers
  // Unavailable (saying why) and, when it answers at once, changes nothing. With a null `done` a
  // write is *best effort*: applied and kept until the store can take it (the GCS's own tables,
  // which it rewrites as they change).
  //
  // Writes table[key] = value unless the key exists and !overwrite. `done` gets true if the key
  // was new.
  virtual void AsyncPut(const std::string& table, const std::string& key, std::string value,
                        bool overwrite, std::function<void(absl::StatusOr<bool>)> done) = 0;
  virtual void AsyncGet(const std::string& table, const std::string& key,
                        std::function<void(absl::StatusOr<std::optional<std::string>>)> done) = 0;
  // `done` gets the number of keys deleted (0 or 1).
  virtual void AsyncDelete(const std::string& table, const std::string& key,
                           std::function<void(absl::StatusOr<int64_t>)> done) = 0;
  // Every row whose key starts with `prefix` ("" for the whole table).
  virtual void AsyncScan(const std::string& table, const std::string& prefix,
                         std::function<void(absl::StatusOr<Rows>)> done) = 0;
};

// Waits for a whole-table scan; for loading tables at start-up only.
absl::StatusOr<StoreClient::Rows> ScanTableSync(StoreClient* store, const std::string& table);
// Writes table[key] = value best effort (a null `done`), without waiting: the GCS keeps serving
// from memory while the store is away, and the store sends it when it can.
void PutBestEffort(StoreClient* store, const std::string& table, const std::string& key,
                   std::string value);

}  // namespace troupe
