#include "src/gcs/redis_store_client.h"

#include <hiredis/hiredis.h>

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "src/common/logging.h"

namespace troupe {
namespace {

constexpr size_t kMaxBatchWrites = 1000;
constexpr int64_t kMaxBatchBytes = 16 << 20;
constexpr absl::Duration kIdlePingInterval = absl::Seconds(1);
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);
constexpr absl::Duration kStopFlushTime = absl::Seconds(2);
constexpr int64_t kWriteOverheadBytes = 64;  // the Write struct, the command framing

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

absl::string_view ReplyText(const redisReply& reply) {
  return absl::string_view(reply.str, reply.len);
}

// Escapes the glob characters SCAN MATCH knows, so the prefix matches itself only.
std::string GlobEscape(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// hiredis writes with write(), so a write to a Redis that went away raises SIGPIPE, which would
// end the process. The writer thread blocks it for good; calls on the caller's thread (Connect,
// CheckRedis, the cluster record) block it for their duration and swallow one they raised.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask_);
  }
  ~ScopedSigpipeBlock() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      sigset_t pipe_only;
      sigemptyset(&pipe_only);
      sigaddset(&pipe_only, SIGPIPE);
      const struct timespec zero = {0, 0};
      sigtimedwait(&pipe_only, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }

 private:
  bool was_pending_ = false;
  sigset_t old_mask_;
};

void BlockSigpipeForThisThread() {
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
}

struct HostPort {
  std::string host;
  int port = 0;
};

absl::StatusOr<HostPort> ParseAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  HostPort result;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &result.port) ||
      result.port <= 0 || result.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Redis address '", address, "' is not host:port (e.g. 127.0.0.1:6379); fix the address"));
  }
  result.host = address.substr(0, colon);
  if (result.host.size() >= 2 && result.host.front() == '[' && result.host.back() == ']') {
    result.host = result.host.substr(1, result.host.size() - 2);
  }
  return result;
}

}  // namespace

// The hiredis adapter: one synchronous connection. Every hiredis error (context errors, error
// replies) becomes an absl::Status here and nowhere else. Not thread-safe: one thread at a time.
class RedisConnection {
 public:
  // Connects, AUTHs (if a password is set) and PINGs.
  static absl::StatusOr<std::unique_ptr<RedisConnection>> Open(const RedisOptions& options);

  ~RedisConnection() { redisFree(context_); }

  // Runs one command; an error reply is returned as a Status.
  absl::StatusOr<Reply> Command(const std::vector<absl::string_view>& argv) {
    AppendCommand(argv);
    return ReadReply(argv.front());
  }
  // Pipelining: AppendCommand buffers a command, ReadReply sends the buffer (first time) and
  // reads the next reply. `command` only names it in errors.
  void AppendCommand(const std::vector<absl::string_view>& argv) {
    std::vector<const char*> args;
    std::vector<size_t> lengths;
    args.reserve(argv.size());
    lengths.reserve(argv.size());
    for (absl::string_view arg : argv) {
      args.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    redisAppendCommandArgv(context_, static_cast<int>(args.size()), args.data(), lengths.data());
  }
  absl::StatusOr<Reply> ReadReply(absl::string_view command) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
      return ContextError(command, command_timeout_);
    }
    Reply reply(static_cast<redisReply*>(raw));
    if (reply->type == REDIS_REPLY_ERROR) return ReplyError(command, ReplyText(*reply));
    return reply;
  }

 private:
  RedisConnection(redisContext* context, std::string address, absl::Duration command_timeout)
      : context_(context), address_(std::move(address)), command_timeout_(command_timeout) {}

  // `command`: the command whose reply failed, or "" for the connect itself.
  absl::Status ContextError(absl::string_view command, absl::Duration timeout) const {
    const std::string what = context_->errstr;
    const std::string on = command.empty() ? "connecting" : absl::StrCat("on ", command);
    switch (context_->err) {
      case REDIS_ERR_PROTOCOL:
        return absl::InvalidArgumentError(absl::StrCat(address_,
                                                       " did not speak the Redis protocol ", on,
                                                       " (", what,
                                                       "): is it a Redis server? Fix the address"));
      case REDIS_ERR_EOF:
        return absl::UnavailableError(absl::StrCat("Redis at ", address_,
                                                   " closed the connection ", on, " (", what,
                                                   "): is it running, and is it a Redis?"));
      case REDIS_ERR_IO:
        if (absl::StrContains(what, "temporarily unavailable") ||
            absl::StrContains(what, "timed out")) {
          return absl::UnavailableError(absl::StrCat(
              "Redis at ", address_, " did not answer ", command.empty() ? "the connect" : command,
              " within ", absl::FormatDuration(timeout),
              ": is it a Redis server, running and not overloaded?"));
        }
        [[fallthrough]];
      default:
        return absl::UnavailableError(absl::StrCat("Redis at ", address_, " is unreachable (",
                                                   what, ") ", on,
                                                   ": start redis-server there or fix the address"));
    }
  }

  absl::Status ReplyError(absl::string_view command, absl::string_view error) const {
    if (absl::StartsWith(error, "NOAUTH")) {
      return absl::PermissionDeniedError(absl::StrCat(
          "Redis at ", address_, " requires authentication (", error,
          "); give its password (and the username, for an ACL user)"));
    }
    if (absl::StartsWith(error, "WRONGPASS")) {
      return absl::PermissionDeniedError(absl::StrCat("Redis at ", address_,
                                                      " rejected the username/password (", error,
                                                      "); check the password (and username)"));
    }
    if (absl::StrContains(error, "without any password configured")) {
      return absl::InvalidArgumentError(
          absl::StrCat("Redis at ", address_, " has no password set but a password was given (",
                       error, "); give none, or set requirepass on the server"));
    }
    if (absl::StartsWith(error, "NOPERM")) {
      return absl::PermissionDeniedError(
          absl::StrCat("Redis at ", address_, " denied ", command, " (", error,
                       "); grant the user the commands and keys it needs, e.g. "
                       "ACL SETUSER <user> ~troupe:* +@all"));
    }
    if (absl::StartsWith(error, "LOADING")) {
      return absl::UnavailableError(absl::StrCat("Redis at ", address_,
                                                 " is still loading its data (", error,
                                                 "); try again in a moment"));
    }
    if (absl::StartsWith(error, "WRONGTYPE")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Redis at ", address_, " answered ", command, " with ", error,
          ": another program wrote a non-hash key under this cluster's prefix"));
    }
    return absl::UnknownError(
        absl::StrCat("Redis at ", address_, " answered ", command, " with an error: ", error));
  }

  redisContext* context_;
  const std::string address_;
  const absl::Duration command_timeout_;
};

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::Open(
    const RedisOptions& options) {
  absl::StatusOr<HostPort> host_port = ParseAddress(options.address);
  if (!host_port.ok()) return host_port.status();
  if (!options.username.empty() && options.password.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a Redis username ('", options.username,
                     "') was given without a password; give the user's password too"));
  }
  redisContext* context = redisConnectWithTimeout(host_port->host.c_str(), host_port->port,
                                                  absl::ToTimeval(options.connect_timeout));
  if (context == nullptr) {
    return absl::ResourceExhaustedError("cannot allocate a hiredis context");
  }
  std::unique_ptr<RedisConnection> connection(
      new RedisConnection(context, options.address, options.command_timeout));
  if (context->err != 0) {
    return connection->ContextError("", options.connect_timeout);
  }
  redisSetTimeout(context, absl::ToTimeval(options.command_timeout));
  redisEnableKeepAlive(context);
  if (!options.password.empty()) {
    std::vector<absl::string_view> auth = {"AUTH"};
    if (!options.username.empty()) auth.push_back(options.username);
    auth.push_back(options.password);
    absl::StatusOr<Reply> reply = connection->Command(auth);
    if (!reply.ok()) return reply.status();
  }
  absl::StatusOr<Reply> pong = connection->Command({"PING"});
  if (!pong.ok()) return pong.status();
  if ((*pong)->type != REDIS_REPLY_STATUS || ReplyText(**pong) != "PONG") {
    return absl::InvalidArgumentError(absl::StrCat(
        options.address, " did not answer PING with PONG: is it a Redis server? Fix the address"));
  }
  return connection;
}

absl::Status CheckRedis(const RedisOptions& options) {
  ScopedSigpipeBlock no_sigpipe;
  return RedisConnection::Open(options).status();
}

// ---------------------------------------------------------------------------------------------
// RedisStoreClient

absl::StatusOr<std::unique_ptr<RedisStoreClient>> RedisStoreClient::Connect(RedisOptions options) {
  if (options.key_prefix.empty()) {
    return absl::InvalidArgumentError(
        "RedisOptions::key_prefix is empty; give one, e.g. troupe:<cluster id hex>");
  }
  ScopedSigpipeBlock no_sigpipe;
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection = RedisConnection::Open(options);
  if (!connection.ok()) return connection.status();
  std::unique_ptr<RedisStoreClient> store(
      new RedisStoreClient(std::move(options), std::move(*connection)));
  absl::Status loaded = store->Load();
  if (!loaded.ok()) return loaded;
  store->writer_ = std::thread([raw = store.get()] { raw->RunWriter(); });
  return store;
}

RedisStoreClient::RedisStoreClient(RedisOptions options,
                                   std::unique_ptr<RedisConnection> connection)
    : options_(std::move(options)), connection_(std::move(connection)) {}

absl::Status RedisStoreClient::Load() {
  const std::string pattern = GlobEscape(options_.key_prefix) + ":*";
  const size_t table_start = options_.key_prefix.size() + 1;
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    absl::StatusOr<Reply> reply =
        connection_->Command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (!reply.ok()) return reply.status();
    const redisReply& r = **reply;
    if (r.type != REDIS_REPLY_ARRAY || r.elements != 2) {
      return absl::InternalError("Redis answered SCAN with an unexpected reply");
    }
    cursor = std::string(ReplyText(*r.element[0]));
    for (size_t i = 0; i < r.element[1]->elements; ++i) {
      keys.emplace_back(ReplyText(*r.element[1]->element[i]));
    }
  } while (cursor != "0");

  absl::MutexLock lock(&mu_);
  int64_t rows = 0;
  for (const std::string& key : keys) {
    const std::string table = key.substr(table_start);
    cursor = "0";
    do {
      absl::StatusOr<Reply> reply = connection_->Command({"HSCAN", key, cursor, "COUNT", "1000"});
      if (!reply.ok()) {
        return absl::Status(reply.status().code(),
                            absl::StrCat("loading ", key, ": ", reply.status().message()));
      }
      const redisReply& r = **reply;
      if (r.type != REDIS_REPLY_ARRAY || r.elements != 2) {
        return absl::InternalError("Redis answered HSCAN with an unexpected reply");
      }
      cursor = std::string(ReplyText(*r.element[0]));
      const redisReply& fields = *r.element[1];
      for (size_t i = 0; i + 1 < fields.elements; i += 2) {
        mirror_.AsyncPut(table, std::string(ReplyText(*fields.element[i])),
                         std::string(ReplyText(*fields.element[i + 1])), /*overwrite=*/true,
                         nullptr);
        ++rows;
      }
    } while (cursor != "0");
  }
  TROUPE_LOG(Info) << "loaded " << keys.size() << " tables (" << rows << " rows) from Redis at "
                   << options_.address << " under " << options_.key_prefix;
  return absl::OkStatus();
}

RedisStoreClient::~RedisStoreClient() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stop_deadline_ = absl::Now() + kStopFlushTime;
  }
  if (writer_.joinable()) writer_.join();
  std::vector<std::function<void(const absl::Status&)>> unacknowledged;
  {
    absl::MutexLock lock(&mu_);
    for (Write& write : queue_) {
      if (write.done) unacknowledged.push_back(std::move(write.done));
    }
    if (!queue_.empty()) {
      TROUPE_LOG(Warning) << queue_.size() << " writes (" << queued_bytes_
                          << " bytes) did not reach Redis at " << options_.address
                          << " before the store was closed";
    }
    queue_.clear();
  }
  const absl::Status closed =
      absl::UnavailableError("the Redis store was closed before Redis acknowledged the write");
  for (auto& done : unacknowledged) done(closed);
}

absl::Status RedisStoreClient::RefusalLocked() const {
  if (fatal_.has_value()) return *fatal_;
  if (connected_) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "the GCS cannot save this write: its Redis at ", options_.address,
      " has been unreachable for ",
      absl::FormatDuration(absl::Trunc(absl::Now() - away_since_, absl::Milliseconds(100))), " (",
      away_reason_,
      "). Nothing was changed; try again once Redis is back (the GCS keeps serving "
      "reads meanwhile)"));
}

std::function<void(const absl::Status&)> RedisStoreClient::EnqueueLocked(
    const std::string& table, const std::string& key, std::optional<std::string> value,
    std::function<void(const absl::Status&)> done, absl::Status* now) {
  if (fatal_.has_value()) {
    *now = *fatal_;
    return done;
  }
  Write write;
  write.bytes = static_cast<int64_t>(table.size() + key.size() + options_.key_prefix.size() +
                                     (value ? value->size() : 0)) +
                kWriteOverheadBytes;
  queued_bytes_ += write.bytes;
  if (queued_bytes_ > options_.max_queued_bytes) overflowed_ = true;
  // A best-effort write (no `done`) also waits here while Redis is away; an acknowledged one
  // only gets here while Redis is connected (RefusalLocked).
  write.done = std::move(done);
  write.table = table;
  write.key = key;
  write.value = std::move(value);
  queue_.push_back(std::move(write));
  return nullptr;
}

void RedisStoreClient::AsyncPut(const std::string& table, const std::string& key,
                                std::string value, bool overwrite,
                                std::function<void(absl::StatusOr<bool>)> done) {
  bool added = false;
  std::function<void(const absl::Status&)> run_now;
  absl::Status now;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (done) refused = RefusalLocked();
    if (refused.ok()) {
      // The in-memory store answers on this thread, before AsyncPut returns.
      mirror_.AsyncPut(table, key, value, overwrite,
                       [&added](absl::StatusOr<bool> result) { added = result.ok() && *result; });
      if (!added && !overwrite) {
        // Nothing changes; nothing to send.
      } else {
        std::function<void(const absl::Status&)> finish;
        if (done) {
          finish = [done = std::move(done), added](const absl::Status& status) {
            if (status.ok()) {
              done(added);
            } else {
              done(status);
            }
          };
          done = nullptr;
        }
        run_now = EnqueueLocked(table, key, std::move(value), std::move(finish), &now);
      }
    }
  }
  if (!refused.ok()) {
    done(refused);
    return;
  }
  if (run_now) run_now(now);
  if (done) done(added);
}

void RedisStoreClient::AsyncGet(
    const std::string& table, const std::string& key,
    std::function<void(absl::StatusOr<std::optional<std::string>>)> done) {
  mirror_.AsyncGet(table, key, std::move(done));
}

void RedisStoreClient::AsyncDelete(const std::string& table, const std::string& key,
                                   std::function<void(absl::StatusOr<int64_t>)> done) {
  std::function<void(const absl::Status&)> run_now;
  absl::Status now;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (done) refused = RefusalLocked();
    int64_t deleted = 0;
    if (refused.ok()) {
      mirror_.AsyncDelete(table, key, [&deleted](absl::StatusOr<int64_t> result) {
        deleted = result.ok() ? *result : 0;
      });
    }
    if (deleted == 1) {
      std::function<void(const absl::Status&)> finish;
      if (done) {
        finish = [done = std::move(done)](const absl::Status& status) {
          if (status.ok()) {
            done(int64_t{1});
          } else {
            done(status);
          }
        };
        done = nullptr;
      }
      run_now = EnqueueLocked(table, key, std::nullopt, std::move(finish), &now);
    }
  }
  if (!refused.ok()) {
    done(refused);
    return;
  }
  if (run_now) run_now(now);
  if (done) done(int64_t{0});
}

void RedisStoreClient::AsyncScan(const std::string& table, const std::string& prefix,
                                 std::function<void(absl::StatusOr<Rows>)> done) {
  mirror_.AsyncScan(table, prefix, std::move(done));
}

absl::Status RedisStoreClient::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto flushed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return fatal_.has_value() || (queue_.empty() && in_flight_ == 0);
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&flushed), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "Redis at ", options_.address, " did not acknowledge every write within ",
        absl::FormatDuration(timeout), ": ", queued_bytes_, " bytes still queued, ",
        connected_ ? "connected" : "disconnected"));
  }
  if (fatal_.has_value()) return *fatal_;
  return absl::OkStatus();
}

bool RedisStoreClient::connected() const {
  absl::MutexLock lock(&mu_);
  return connected_;
}

int64_t RedisStoreClient::queued_bytes() const {
  absl::MutexLock lock(&mu_);
  return queued_bytes_;
}

// ---------------------------------------------------------------------------------------------
// The writer thread

void RedisStoreClient::RunWriter() {
  BlockSigpipeForThisThread();
  std::deque<Write> batch;  // taken from queue_, sent (again) until acknowledged
  absl::Duration backoff = kFirstBackoff;
  absl::Status last_error;
  while (true) {
    bool ping_due = false;
    std::optional<absl::Status> overflow;
    {
      absl::MutexLock lock(&mu_);
      if (batch.empty()) {
        auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !queue_.empty() || stopping_ || overflowed_;
        };
        if (connection_ != nullptr &&
            !mu_.AwaitWithTimeout(absl::Condition(&has_work), kIdlePingInterval)) {
          ping_due = true;
        }
        int64_t batch_bytes = 0;
        while (!queue_.empty() && batch.size() < kMaxBatchWrites && batch_bytes < kMaxBatchBytes) {
          batch_bytes += queue_.front().bytes;
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        in_flight_ = static_cast<int64_t>(batch.size());
      }
      if (overflowed_) {
        overflow = absl::ResourceExhaustedError(absl::StrCat(
            "more than ", options_.max_queued_bytes, " bytes of writes are waiting for Redis at ",
            options_.address, " (", connected_ ? "connected but not keeping up" : "disconnected",
            last_error.ok() ? "" : absl::StrCat("; last error: ", last_error.ToString()),
            "); the GCS's tables can no longer be kept in Redis. Fix Redis and restart the head"));
      }
      if (!overflow && stopping_ && (batch.empty() || absl::Now() > stop_deadline_)) break;
    }
    if (overflow) {
      Fatal(*overflow, batch);
      return;
    }

    if (connection_ == nullptr) {
      absl::StatusOr<std::unique_ptr<RedisConnection>> connection = RedisConnection::Open(options_);
      if (!connection.ok()) {
        last_error = connection.status();
        std::optional<absl::Status> gave_up;
        bool stopping;
        absl::Duration wait = backoff;
        {
          absl::MutexLock lock(&mu_);
          stopping = stopping_;
          const absl::Duration away = absl::Now() - away_since_;
          // Try once more right at the deadline rather than up to a backoff past it.
          wait = std::min(backoff, std::max(options_.give_up_after - away, absl::Milliseconds(1)));
          if (away > options_.give_up_after) {
            gave_up = absl::UnavailableError(absl::StrCat(
                "Redis at ", options_.address, " has been away for ", absl::FormatDuration(away),
                " (more than ", absl::FormatDuration(options_.give_up_after),
                "; last error: ", last_error.message(), "; ", queued_bytes_,
                " bytes of writes waiting); the GCS's tables can no longer be kept in Redis. "
                "Bring Redis back and restart the head"));
          }
        }
        if (gave_up) {
          Fatal(*gave_up, batch);
          return;
        }
        if (stopping) {
          absl::SleepFor(wait);  // the destructor's deadline ends the loop
        } else {
          absl::MutexLock lock(&mu_);
          auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
          mu_.AwaitWithTimeout(absl::Condition(&stop), wait);
        }
        backoff = std::min(backoff * 2, kMaxBackoff);
        continue;
      }
      connection_ = std::move(*connection);
      backoff = kFirstBackoff;
      absl::MutexLock lock(&mu_);
      connected_ = true;
      TROUPE_LOG(Info) << "reconnected to Redis at " << options_.address << " after "
                       << absl::FormatDuration(absl::Now() - away_since_) << "; " << queued_bytes_
                       << " bytes of writes to send";
    }

    if (!batch.empty()) {
      absl::Status sent = SendBatch(batch);
      if (sent.ok()) {
        OnBatchAcknowledged(batch);
      } else {
        last_error = sent;
        OnDisconnected(sent, batch);
      }
    } else if (ping_due) {
      absl::StatusOr<Reply> pong = connection_->Command({"PING"});
      if (!pong.ok()) {
        last_error = pong.status();
        OnDisconnected(pong.status(), batch);
      }
    }
  }
  // Stopping: whatever is left in the batch was not acknowledged.
  std::vector<std::function<void(const absl::Status&)>> unacknowledged;
  for (Write& write : batch) {
    if (write.done) unacknowledged.push_back(std::move(write.done));
  }
  {
    absl::MutexLock lock(&mu_);
    for (Write& write : batch) queued_bytes_ -= write.bytes;
    in_flight_ = 0;
    if (!batch.empty()) {
      TROUPE_LOG(Warning) << batch.size() << " writes did not reach Redis at " << options_.address
                          << " before the store was closed";
    }
  }
  const absl::Status closed =
      absl::UnavailableError("the Redis store was closed before Redis acknowledged the write");
  for (auto& done : unacknowledged) done(closed);
}

absl::Status RedisStoreClient::SendBatch(const std::deque<Write>& batch) {
  std::vector<std::string> keys;
  keys.reserve(batch.size());
  for (const Write& write : batch) {
    keys.push_back(absl::StrCat(options_.key_prefix, ":", write.table));
    if (write.value.has_value()) {
      connection_->AppendCommand({"HSET", keys.back(), write.key, *write.value});
    } else {
      connection_->AppendCommand({"HDEL", keys.back(), write.key});
    }
  }
  absl::Status first_error;
  for (const Write& write : batch) {
    absl::StatusOr<Reply> reply = connection_->ReadReply(write.value ? "HSET" : "HDEL");
    if (!reply.ok()) {
      // A broken connection answers no more; an error reply leaves the others to read.
      if (first_error.ok()) first_error = reply.status();
      if (absl::IsUnavailable(reply.status()) || absl::IsInvalidArgument(reply.status())) break;
    }
  }
  return first_error;
}

void RedisStoreClient::OnBatchAcknowledged(std::deque<Write>& batch) {
  std::vector<std::function<void(const absl::Status&)>> acknowledged;
  {
    absl::MutexLock lock(&mu_);
    for (Write& write : batch) {
      queued_bytes_ -= write.bytes;
      if (write.done) acknowledged.push_back(std::move(write.done));
    }
    in_flight_ = 0;
  }
  batch.clear();
  for (auto& done : acknowledged) done(absl::OkStatus());
}

void RedisStoreClient::OnDisconnected(const absl::Status& why, std::deque<Write>& batch) {
  // Any failure drops the connection: a reconnect starts from a clean protocol state, and the
  // whole batch is sent again (HSET/HDEL are idempotent, and the order is kept).
  connection_.reset();
  std::vector<std::function<void(const absl::Status&)>> released;
  const absl::Status unacknowledged = absl::UnavailableError(absl::StrCat(
      "Redis at ", options_.address, " did not acknowledge the write (", why.message(),
      "), so the GCS cannot promise it is saved. It is kept and sent again once Redis is back "
      "(unless the GCS gives up on Redis first), so it may still appear; try again, and expect "
      "an answer saying it already exists"));
  {
    absl::MutexLock lock(&mu_);
    if (connected_) {
      connected_ = false;
      away_since_ = absl::Now();
      away_reason_ = std::string(why.message());
      TROUPE_LOG(Warning) << "lost Redis at " << options_.address << ": " << why
                          << "; serving from memory, queueing writes and reconnecting (giving up "
                          << "after " << absl::FormatDuration(options_.give_up_after) << ")";
    }
    // Redis is away: these writes stay queued, but nobody may wait for them to be saved.
    for (Write& write : batch) {
      if (write.done) released.push_back(std::move(write.done));
      write.done = nullptr;
    }
    for (Write& write : queue_) {
      if (write.done) released.push_back(std::move(write.done));
      write.done = nullptr;
    }
  }
  for (auto& done : released) done(unacknowledged);
}

void RedisStoreClient::Fatal(const absl::Status& status, std::deque<Write>& batch) {
  std::vector<std::function<void(const absl::Status&)>> failed;
  {
    absl::MutexLock lock(&mu_);
    fatal_ = status;
    for (Write& write : batch) {
      if (write.done) failed.push_back(std::move(write.done));
    }
    for (Write& write : queue_) {
      if (write.done) failed.push_back(std::move(write.done));
    }
    queue_.clear();
    queued_bytes_ = 0;
    in_flight_ = 0;
  }
  batch.clear();
  connection_.reset();
  TROUPE_LOG(Error) << status;
  for (auto& done : failed) done(status);
  if (options_.on_fatal) options_.on_fatal(status);
}

// ---------------------------------------------------------------------------------------------
// The cluster record

namespace {
std::string ClusterRecordKey(const std::string& name) {
  return absl::StrCat("troupe:cluster:", name);
}
}  // namespace

absl::StatusOr<std::optional<ClusterRecord>> ReadClusterRecord(const RedisOptions& options,
                                                               const std::string& name) {
  ScopedSigpipeBlock no_sigpipe;
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection = RedisConnection::Open(options);
  if (!connection.ok()) return connection.status();
  const std::string key = ClusterRecordKey(name);
  absl::StatusOr<Reply> reply = (*connection)->Command({"HGETALL", key});
  if (!reply.ok()) return reply.status();
  const redisReply& r = **reply;
  if (r.type != REDIS_REPLY_ARRAY) {
    return absl::InternalError("Redis answered HGETALL with an unexpected reply");
  }
  if (r.elements == 0) return std::nullopt;
  std::optional<std::string> cluster_id, token_hash;
  for (size_t i = 0; i + 1 < r.elements; i += 2) {
    const absl::string_view field = ReplyText(*r.element[i]);
    if (field == "cluster_id") cluster_id = std::string(ReplyText(*r.element[i + 1]));
    if (field == "token_hash") token_hash = std::string(ReplyText(*r.element[i + 1]));
  }
  if (!cluster_id || !token_hash) {
    return absl::DataLossError(absl::StrCat("the cluster record ", key, " in Redis at ",
                                            options.address,
                                            " lacks cluster_id or token_hash; delete it (DEL ",
                                            key, ") to start a new cluster under that name"));
  }
  return ClusterRecord{*cluster_id, *token_hash};
}

absl::Status WriteClusterRecord(const RedisOptions& options, const std::string& name,
                                const ClusterRecord& record) {
  ScopedSigpipeBlock no_sigpipe;
  absl::StatusOr<std::unique_ptr<RedisConnection>> connection = RedisConnection::Open(options);
  if (!connection.ok()) return connection.status();
  return (*connection)
      ->Command({"HSET", ClusterRecordKey(name), "cluster_id", record.cluster_id_hex, "token_hash",
                 record.token_hash_hex})
      .status();
}

}  // namespace troupe
