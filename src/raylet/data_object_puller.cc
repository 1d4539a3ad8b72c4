#include "src/raylet/data_object_puller.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/raylet/object_data_protocol.h"

namespace troupe {
namespace {

constexpr size_t kMaxIdleConnections = 256;
constexpr size_t kMaxKnownSources = 4096;

// The host of "host:port" (IPv6 brackets removed).
std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

// Forwards to the real sink and notes the data port the header names.
class DataObjectPuller::PortLearningSink : public ChunkSink {
 public:
  explicit PortLearningSink(ChunkSink* sink) : sink_(sink) {}
  absl::Status OnHeader(const rpc::ObjectChunk& header) override {
    port_ = header.data_port();
    return sink_->OnHeader(header);
  }
  absl::StatusOr<char*> Place(int64_t offset, int64_t length) override {
    return sink_->Place(offset, length);
  }
  void Placed(int64_t offset, int64_t length) override { sink_->Placed(offset, length); }
  int port() const { return port_; }

 private:
  ChunkSink* const sink_;
  int port_ = 0;
};

DataObjectPuller::DataObjectPuller(ObjectPuller* fallback, DataObjectPullerOptions options)
    : fallback_(fallback), options_(std::move(options)) {}

DataObjectPuller::~DataObjectPuller() = default;

int64_t DataObjectPuller::data_pulls() const {
  absl::MutexLock lock(&mu_);
  return data_pulls_;
}

int64_t DataObjectPuller::fallback_pulls() const {
  absl::MutexLock lock(&mu_);
  return fallback_pulls_;
}

absl::Status DataObjectPuller::Pull(const PullRange& range, ChunkSink* sink) {
  const int port = DataPort(range.address);
  if (port <= 0) return PullThroughFallback(range, sink);
  const Key key{range.address, range.connection};
  // A kept connection may have been closed by the server meanwhile (its idle timeout): one
  // that fails before any answer is replaced by a fresh one once.
  std::unique_ptr<DataConnection> connection = TakeIdle(key);
  const bool reused = connection != nullptr;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool fresh = !reused || attempt > 0;
    if (fresh) {
      auto connected = DataConnection::Connect(HostOf(range.address), port, options_.tls.get(),
                                               options_.connect_timeout);
      if (!connected.ok()) {
        // Aborted: closed during the handshake (the server's cap), not unreachable.
        if (connected.status().code() != absl::StatusCode::kAborted) {
          MarkUnreachable(range.address, connected.status());
        }
        return PullThroughFallback(range, sink);
      }
      connection = std::move(*connected);
      connection->SetTimeouts(options_.receive_timeout, options_.receive_timeout);
    }
    bool answered = false;
    absl::Status status = PullOn(connection.get(), range, sink, &answered);
    if (status.ok()) {
      KeepIdle(key, std::move(connection));
      return status;
    }
    if (answered) {
      return absl::Status(status.code(), absl::StrCat("object data port of the raylet at ",
                                                      range.address, ": ", status.message()));
    }
    if (fresh) {
      // Closed unanswered: the server is at its connection cap (or going away).
      TROUPE_LOG(Debug) << "the object data port of " << range.address
                        << " did not answer (" << status.message() << "); pulling over gRPC";
      return PullThroughFallback(range, sink);
    }
  }
  return PullThroughFallback(range, sink);  // not reached
}

absl::Status DataObjectPuller::PullThroughFallback(const PullRange& range, ChunkSink* sink) {
  PortLearningSink learning(sink);
  absl::Status status = fallback_->Pull(range, &learning);
  absl::MutexLock lock(&mu_);
  ++fallback_pulls_;
  if (learning.port() > 0) {
    if (ports_.size() >= kMaxKnownSources) ports_.clear();  // sources come and go
    ports_[range.address] = learning.port();
  }
  return status;
}

absl::Status DataObjectPuller::PullOn(DataConnection* connection, const PullRange& range,
                                      ChunkSink* sink, bool* answered) {
  *answered = false;
  const std::string request =
      EncodeDataRequest({options_.token, range.id.Binary(), range.offset, range.length});
  if (absl::Status sent = connection->WriteAll(request.data(), request.size()); !sent.ok()) {
    return sent;
  }
  char fixed[kDataReplyFixedBytes];
  if (absl::Status read = connection->ReadExact(fixed, sizeof(fixed)); !read.ok()) return read;
  *answered = true;
  auto reply = DecodeDataReplyFixed(fixed);
  if (!reply.ok()) return reply.status();
  if (reply->code != absl::StatusCode::kOk) {
    std::string message(reply->message_bytes, '\0');
    if (absl::Status read = connection->ReadExact(message.data(), message.size()); !read.ok()) {
      message = "(the error message was cut off)";
    }
    return absl::Status(reply->code, message);
  }
  char range_fixed[kDataReplyRangeBytes];
  TROUPE_RETURN_IF_ERROR(connection->ReadExact(range_fixed, sizeof(range_fixed)));
  size_t worker_bytes = 0, node_bytes = 0;
  auto range_header = DecodeDataRangeFixed(range_fixed, &worker_bytes, &node_bytes);
  if (!range_header.ok()) return range_header.status();
  std::string ids(worker_bytes + node_bytes, '\0');
  TROUPE_RETURN_IF_ERROR(connection->ReadExact(ids.data(), ids.size()));
  rpc::ObjectChunk header;
  header.set_object_id(range.id.Binary());
  header.set_total_size(range_header->total_size);
  header.set_owner_worker_id(ids.substr(0, worker_bytes));
  header.set_owner_node_id(ids.substr(worker_bytes));
  TROUPE_RETURN_IF_ERROR(sink->OnHeader(header));
  const int64_t chunk = range.chunk_size > 0 ? range.chunk_size : int64_t{1} << 20;
  for (int64_t done = 0; done < range_header->length;) {
    const int64_t offset = range.offset + done;
    const int64_t length = std::min(chunk, range_header->length - done);
    auto place = sink->Place(offset, length);
    if (!place.ok()) return place.status();
    TROUPE_RETURN_IF_ERROR(connection->ReadExact(*place, length));
    sink->Placed(offset, length);
    done += length;
  }
  {
    absl::MutexLock lock(&mu_);
    ++data_pulls_;
  }
  return absl::OkStatus();
}

int DataObjectPuller::DataPort(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (auto until = unreachable_until_.find(address); until != unreachable_until_.end()) {
    if (absl::Now() < until->second) return 0;
    unreachable_until_.erase(until);
  }
  auto port = ports_.find(address);
  return port == ports_.end() ? 0 : port->second;
}

void DataObjectPuller::MarkUnreachable(const std::string& address, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (unreachable_until_.size() >= kMaxKnownSources) unreachable_until_.clear();
  auto [it, added] = unreachable_until_.emplace(address, absl::InfinitePast());
  const bool was_backing_off = !added;
  it->second = absl::Now() + options_.unreachable_backoff;
  if (!was_backing_off) {
    TROUPE_LOG(Warning) << "cannot open a data connection to the raylet at " << address << " ("
                        << why.message() << "); pulling its objects over gRPC for "
                        << absl::FormatDuration(options_.unreachable_backoff)
                        << " (is its object data port open between the nodes?)";
  }
}

std::unique_ptr<DataConnection> DataObjectPuller::TakeIdle(const Key& key) {
  absl::MutexLock lock(&mu_);
  auto found = idle_.find(key);
  if (found == idle_.end()) return nullptr;
  std::unique_ptr<DataConnection> connection = std::move(found->second);
  idle_.erase(found);
  return connection;
}

void DataObjectPuller::KeepIdle(const Key& key, std::unique_ptr<DataConnection> connection) {
  std::unique_ptr<DataConnection> dropped;  // closed outside the lock
  absl::MutexLock lock(&mu_);
  if (idle_.size() >= kMaxIdleConnections) idle_.clear();
  auto& slot = idle_[key];
  dropped = std::move(slot);
  slot = std::move(connection);
}

}  // namespace troupe
