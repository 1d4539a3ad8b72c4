// DataObjectPuller: the ObjectPuller that takes bulk object bytes off gRPC. A pull whose source's
// object data port (object_data_server.h) is known goes over a data connection: one request,
// then the range's bytes are received straight into where the ChunkSink places them (recv(2),
// or SSL_read with TLS, into the destination copy's mapping: no copy in user space beyond TLS's
// own). The port is learned from the header of a pull through `fallback` (the gRPC puller: an
// ObjectTransfer's first chunk), which carries it in ObjectChunk.data_port.
// Falls back to `fallback` for a pull when the source has no data port (an older raylet), when
// its data port cannot be connected to (refused, unreachable, TLS handshake failed: the source
// is then pulled through `fallback` alone for a minute, logged once), or when it closes a new
// connection unanswered (its connection cap). Errors after the reply began (the source died
// mid-range) are returned, so the transfer moves on to its next source.
// Connections are kept for reuse per (source, PullRange::connection), at most one idle each.
// Owned by the Raylet; borrows `fallback` (must outlive it). Thread-safe: the port table and
// the idle connections are under a lock; each pull uses a connection of its own.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/raylet/data_connection.h"
#include "src/raylet/object_puller.h"

namespace troupe {

struct DataObjectPullerOptions {
  std::string token;                   // this cluster's token, as text
  std::shared_ptr<const DataTls> tls;  // null: plaintext (must match the cluster's servers)
  absl::Duration connect_timeout = absl::Seconds(5);
  // A source that sends nothing for this long fails the pull (the transfer moves on).
  absl::Duration receive_timeout = absl::Seconds(30);
  // After a data port could not be connected to, its source is pulled through gRPC this long.
  absl::Duration unreachable_backoff = absl::Minutes(1);
};

class DataObjectPuller : public ObjectPuller {
 public:
  DataObjectPuller(ObjectPuller* fallback, DataObjectPullerOptions options);
  ~DataObjectPuller() override;

  absl::Status Pull(const PullRange& range, ChunkSink* sink) override;

  // How many pulls went over a data connection and how many through the fallback (for tests).
  int64_t data_pulls() const;
  int64_t fallback_pulls() const;

 private:
  using Key = std::pair<std::string, int>;  // (address, connection)
  class PortLearningSink;

  // Through `fallback`, remembering the data port its header names.
  absl::Status PullThroughFallback(const PullRange& range, ChunkSink* sink);
  // Over `connection`. *answered: whether the server began a reply (else the pull may be
  // retried elsewhere, nothing having reached the sink).
  absl::Status PullOn(DataConnection* connection, const PullRange& range, ChunkSink* sink,
                      bool* answered);
  // The data port of `address`, or 0 when it has none (yet) or is in its back-off.
  int DataPort(const std::string& address);
  void MarkUnreachable(const std::string& address, const absl::Status& why);
  std::unique_ptr<DataConnection> TakeIdle(const Key& key);
  void KeepIdle(const Key& key, std::unique_ptr<DataConnection> connection);

  ObjectPuller* const fallback_;
  const DataObjectPullerOptions options_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> ports_ ABSL_GUARDED_BY(mu_);
  // Sources whose data port could not be reached, until when they are pulled through gRPC.
  absl::flat_hash_map<std::string, absl::Time> unreachable_until_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, std::unique_ptr<DataConnection>> idle_ ABSL_GUARDED_BY(mu_);
  int64_t data_pulls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fallback_pulls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace troupe
