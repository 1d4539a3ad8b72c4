// StoreClient backed by Redis, so the GCS's tables outlive the GCS process (whole-head restarts).
//
// Each table is one Redis hash, "<key_prefix>:<table>". On Connect the store loads every table
// under its prefix into an in-memory mirror; from then on reads are answered from the mirror and
// writes apply to the mirror at once and are queued, in order, for Redis. This GCS must be the only
// writer of its prefix (the mirror decides Put's overwrite=false and Delete's count), and prefixes
// of two clusters must not nest ("troupe:a" and "troupe:a:b").
//
// Threads: the store owns ONE writer thread, which owns a synchronous hiredis connection, drains
// the queue in pipelined batches, reconnects with backoff (re-AUTHing) and resends the batch that
// was not acknowledged (HSET/HDEL are idempotent). The public methods are thread-safe. AsyncGet,
// AsyncScan, writes that change nothing and writes refused while Redis is away run `done` on the
// calling thread before returning; other writes run `done` on the writer thread once Redis
// acknowledged them (see AsyncPut). `done` never runs under the store's lock, so it may call back
// into the store. on_fatal runs on the writer thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/gcs/in_memory_store_client.h"
#include "src/gcs/store_client.h"

namespace troupe {

class RedisConnection;  // the hiredis adapter, private to redis_store_client.cc

struct RedisOptions {
  std::string address;     // "host:port" ("[::1]:6379" for IPv6)
  std::string username;    // "": the default user (AUTH with the password only)
  std::string password;    // "": no AUTH. Never put it on a command line.
  std::string key_prefix;  // e.g. "troupe:<cluster id hex>"; tables are hashes "<prefix>:<table>"
  // Bytes of writes kept while Redis is away or behind; going over it -> on_fatal.
  int64_t max_queued_bytes = 256 << 20;
  // Redis away longer than this (no write acknowledged, reconnects failing) -> on_fatal.
  absl::Duration give_up_after = absl::Seconds(60);
  absl::Duration connect_timeout = absl::Seconds(2);
  // Read/write timeout of every command, so a hung (not dead) Redis counts as away.
  absl::Duration command_timeout = absl::Seconds(5);
  // Called once, on the writer thread, when Redis stayed away past give_up_after or the queue
  // overflowed; the GCS logs the message and exits (no silent divergence from Redis). After it,
  // writes still apply to the mirror but their `done` gets the same error. Null: log only.
  std::function<void(const absl::Status&)> on_fatal;
};

// Connects, AUTHs and PINGs once, then disconnects. Fails at once, with a message saying what was
// wrong and what to do: Unavailable (nothing listening, timed out, closed the connection),
// PermissionDenied (wrong password or user, NOAUTH), InvalidArgument (bad address, a password for
// a Redis that has none, a server that does not speak Redis). `troupe start` uses it to fail fast.
absl::Status CheckRedis(const RedisOptions& options);

class RedisStoreClient : public StoreClient {
 public:
  // Connects (CheckRedis's rules and errors), loads every table under key_prefix into the mirror
  // (SCAN MATCH "<prefix>:*", then HSCAN each hash) and starts the writer thread. key_prefix must
  // not be empty. FailedPrecondition if a key under the prefix is not a hash.
  static absl::StatusOr<std::unique_ptr<RedisStoreClient>> Connect(RedisOptions options);

  // Tries to get the queued writes to Redis for up to ~2 s, then stops the writer thread. Writes
  // still unacknowledged get `done(Unavailable)` if their `done` has not run yet.
  ~RedisStoreClient() override;

  // Writes apply to the mirror at once and are queued for Redis. Two kinds (StoreClient):
  //  - acknowledged (`done` set): `done` gets OK only once Redis acknowledged the write. While
  //    the store is disconnected from Redis (or gave up, on_fatal) it is refused at once with
  //    Unavailable (the fatal status) and changes nothing. One in flight or queued when the
  //    connection breaks gets Unavailable ("did not acknowledge"): it stays queued and reaches
  //    Redis after a reconnect, so it may still be applied (like a timeout).
  //  - best effort (`done` null): queued also while Redis is away, so the GCS keeps serving; it
  //    reaches Redis after a reconnect, or on_fatal fires.
  // A Put with overwrite=false of an existing key, and a Delete of a missing key, change nothing,
  // send nothing and run `done` at once.
  void AsyncPut(const std::string& table, const std::string& key, std::string value, bool overwrite,
                std::function<void(absl::StatusOr<bool>)> done) override;
  void AsyncGet(const std::string& table, const std::string& key,
                std::function<void(absl::StatusOr<std::optional<std::string>>)> done) override;
  void AsyncDelete(const std::string& table, const std::string& key,
                   std::function<void(absl::StatusOr<int64_t>)> done) override;
  void AsyncScan(const std::string& table, const std::string& prefix,
                 std::function<void(absl::StatusOr<Rows>)> done) override;

  // Waits until every write queued before the call reached Redis (the queue is empty), or
  // `timeout` passed (DeadlineExceeded, saying how much is still queued and whether Redis is
  // connected). The error of on_fatal once that has fired.
  absl::Status Flush(absl::Duration timeout);
  // Whether the writer thread's connection to Redis is up (as of its last command).
  bool connected() const;
  // Bytes of writes queued or in flight and not yet acknowledged by Redis.
  int64_t queued_bytes() const;

  RedisStoreClient(const RedisStoreClient&) = delete;
  RedisStoreClient& operator=(const RedisStoreClient&) = delete;

 private:
  struct Write {
    std::string table;
    std::string key;
    std::optional<std::string> value;               // nullopt: HDEL
    std::function<void(const absl::Status&)> done;  // null once it ran
    int64_t bytes = 0;
  };

  RedisStoreClient(RedisOptions options, std::unique_ptr<RedisConnection> connection);
  absl::Status Load();
  // Why an acknowledged write cannot be taken now (Redis away, or the store gave up); OK if it
  // can.
  absl::Status RefusalLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a write whose mirror update was made under the same lock hold. Returns the callback
  // to run (after unlocking) and sets `*now` to its status when `done` must run at once.
  std::function<void(const absl::Status&)> EnqueueLocked(
      const std::string& table, const std::string& key, std::optional<std::string> value,
      std::function<void(const absl::Status&)> done, absl::Status* now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The writer thread and its steps.
  void RunWriter();
  absl::Status SendBatch(const std::deque<Write>& batch);
  void OnBatchAcknowledged(std::deque<Write>& batch);
  void OnDisconnected(const absl::Status& why, std::deque<Write>& batch);
  void Fatal(const absl::Status& status, std::deque<Write>& batch);

  const RedisOptions options_;
  std::unique_ptr<RedisConnection> connection_;  // used by the writer thread only (and Load, before)

  mutable absl::Mutex mu_;
  // The mirror every read is served from. Writes change it under mu_ together with queueing
  // them, so it and Redis see the same order; reads take only its own lock.
  InMemoryStoreClient mirror_;
  std::deque<Write> queue_ ABSL_GUARDED_BY(mu_);  // not yet taken by the writer
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;   // queue_ plus the writer's batch
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;      // writes in the writer's batch
  bool connected_ ABSL_GUARDED_BY(mu_) = true;
  absl::Time away_since_ ABSL_GUARDED_BY(mu_);  // when connected_ last went false
  std::string away_reason_ ABSL_GUARDED_BY(mu_);  // the error that made it go false
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> fatal_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time stop_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::thread writer_;
};

// The "cluster record" for whole-head restarts: a hash at "troupe:cluster:<name>" (name: the
// cluster namespace, e.g. "default") with fields "cluster_id" (hex) and "token_hash" (hex SHA-256
// of the token's full text, Sha256Hex in src/common/sha256.h). Never the token itself.
struct ClusterRecord {
  std::string cluster_id_hex;
  std::string token_hash_hex;
};

// Each connects with CheckRedis's rules. Read: nullopt if there is no record; DataLoss if the hash
// lacks a field. key_prefix of `options` is not used.
absl::StatusOr<std::optional<ClusterRecord>> ReadClusterRecord(const RedisOptions& options,
                                                               const std::string& name);
absl::Status WriteClusterRecord(const RedisOptions& options, const std::string& name,
                                const ClusterRecord& record);

}  // namespace troupe
