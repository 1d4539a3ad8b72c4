// RedisStoreClient against a real redis-server (tests/redis_server.h): round trips, reload by a
// second client, Redis killed and restarted under writes, giving up, the queue bound, AUTH and
// ACL errors, the cluster record.
#include "src/gcs/redis_store_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/sha256.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "tests/redis_server.h"

namespace troupe {
namespace {

using ::troupe::testing::RedisServer;
using ::troupe::testing::WaitUntil;

#define SKIP_WITHOUT_REDIS()                                                                   \
  if (!RedisServer::Available())                                                               \
  GTEST_SKIP() << ::troupe::testing::kRedisServerBinary                                       \
               << " is missing; install redis-server to run the Redis store tests"

RedisOptions OptionsFor(const RedisServer& server, const std::string& prefix = "troupe:test") {
  RedisOptions options;
  options.address = server.address();
  options.password = server.password();
  options.key_prefix = prefix;
  return options;
}

// Synchronous wrappers: the callbacks may run on the writer thread.
absl::StatusOr<bool> Put(StoreClient& store, const std::string& table, const std::string& key,
                         const std::string& value, bool overwrite = true) {
  absl::Notification done;
  absl::StatusOr<bool> result;
  store.AsyncPut(table, key, value, overwrite, [&](absl::StatusOr<bool> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

std::optional<std::string> Get(StoreClient& store, const std::string& table,
                               const std::string& key) {
  std::optional<std::string> value;
  store.AsyncGet(table, key, [&](absl::StatusOr<std::optional<std::string>> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) value = *r;
  });
  return value;
}

absl::StatusOr<int64_t> Delete(StoreClient& store, const std::string& table,
                               const std::string& key) {
  absl::Notification done;
  absl::StatusOr<int64_t> result;
  store.AsyncDelete(table, key, [&](absl::StatusOr<int64_t> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

StoreClient::Rows Scan(StoreClient& store, const std::string& table, const std::string& prefix) {
  StoreClient::Rows rows;
  store.AsyncScan(table, prefix, [&](absl::StatusOr<StoreClient::Rows> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) rows = std::move(*r);
  });
  return rows;
}

// A loopback port with nothing listening a moment ago.
int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(RedisStoreClientTest, RoundTripIncludingBinaryAndReload) {
  SKIP_WITHOUT_REDIS();
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start());
  // Another cluster's table and a key that only a glob would match: both stay untouched.
  ASSERT_OK(server->Command({"HSET", "troupe:other:nodes", "n1", "theirs"}));
  ASSERT_OK(server->Command({"HSET", "troupe:tesXt:nodes", "n1", "glob"}));

  const std::string binary_key("k\0ey", 4);
  const std::string binary_value("v\0a\xff\r\nl", 7);
  {
    ASSERT_OK_AND_ASSIGN(auto store, RedisStoreClient::Connect(OptionsFor(*server, "troupe:te?t")));
    EXPECT_TRUE(Scan(*store, "nodes", "").empty());
    ASSERT_OK_AND_ASSIGN(bool added, Put(*store, "nodes", "n1", "one"));
    EXPECT_TRUE(added);
    ASSERT_OK_AND_ASSIGN(added, Put(*store, "nodes", "n1", "uno"));
    EXPECT_FALSE(added);
    ASSERT_OK(Put(*store, "nodes", "n2", "two"));
    ASSERT_OK(Put(*store, "nodes", "x3", "three"));
    ASSERT_OK(Put(*store, "bin", binary_key, binary_value));
    ASSERT_OK(Put(*store, "jobs", "gone", "soon"));
    ASSERT_OK_AND_ASSIGN(int64_t deleted, Delete(*store, "jobs", "gone"));
    EXPECT_EQ(deleted, 1);
    ASSERT_OK_AND_ASSIGN(deleted, Delete(*store, "jobs", "gone"));
    EXPECT_EQ(deleted, 0);
    EXPECT_EQ(Get(*store, "nodes", "n1"), "uno");
    EXPECT_EQ(Get(*store, "bin", binary_key), binary_value);
    EXPECT_EQ(Get(*store, "nodes", "missing"), std::nullopt);
    EXPECT_EQ(Scan(*store, "nodes", "n"), (StoreClient::Rows{{"n1", "uno"}, {"n2", "two"}}));
    EXPECT_OK(store->Flush(absl::Seconds(5)));
    EXPECT_EQ(store->queued_bytes(), 0);
    EXPECT_TRUE(store->connected());
  }
  ASSERT_OK_AND_ASSIGN(auto reloaded, RedisStoreClient::Connect(OptionsFor(*server, "troupe:te?t")));
  EXPECT_EQ(Scan(*reloaded, "nodes", ""),
            (StoreClient::Rows{{"n1", "uno"}, {"n2", "two"}, {"x3", "three"}}));
  EXPECT_EQ(Scan(*reloaded, "bin", ""), (StoreClient::Rows{{binary_key, binary_value}}));
  EXPECT_TRUE(Scan(*reloaded, "jobs", "").empty());
  ASSERT_OK_AND_ASSIGN(auto raw, server->Command({"HGET", "troupe:te?t:bin", binary_key}));
  EXPECT_EQ(raw, std::vector<std::string>{binary_value});
  ASSERT_OK_AND_ASSIGN(raw, server->Command({"HGETALL", "troupe:other:nodes"}));
  EXPECT_EQ(raw, (std::vector<std::string>{"n1", "theirs"}));
  ASSERT_OK_AND_ASSIGN(raw, server->Command({"HGETALL", "troupe:tesXt:nodes"}));
  EXPECT_EQ(raw, (std::vector<std::string>{"n1", "glob"}));
}

TEST(RedisStoreClientTest, PutWithoutOverwriteKeepsTheFirstValue) {
  SKIP_WITHOUT_REDIS();
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start());
  {
    ASSERT_OK_AND_ASSIGN(auto store, RedisStoreClient::Connect(OptionsFor(*server)));
    ASSERT_OK_AND_ASSIGN(bool added, Put(*store, "kv", "k", "first", /*overwrite=*/false));
    EXPECT_TRUE(added);
    ASSERT_OK_AND_ASSIGN(added, Put(*store, "kv", "k", "second", /*overwrite=*/false));
    EXPECT_FALSE(added);
    EXPECT_EQ(Get(*store, "kv", "k"), "first");
  }
  // Decided against what was loaded, too.
  ASSERT_OK_AND_ASSIGN(auto store, RedisStoreClient::Connect(OptionsFor(*server)));
  ASSERT_OK_AND_ASSIGN(bool added, Put(*store, "kv", "k", "third", /*overwrite=*/false));
  EXPECT_FALSE(added);
  ASSERT_OK(store->Flush(absl::Seconds(5)));
  ASSERT_OK_AND_ASSIGN(auto raw, server->Command({"HGET", "troupe:test:kv", "k"}));
  EXPECT_EQ(raw, std::vector<std::string>{"first"});
}

TEST(RedisStoreClientTest, DestructorFlushesQueuedWrites) {
  SKIP_WITHOUT_REDIS();
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start());
  constexpr int kRows = 5000;
  {
    ASSERT_OK_AND_ASSIGN(auto store, RedisStoreClient::Connect(OptionsFor(*server)));
    for (int i = 0; i < kRows; ++i) PutBestEffort(store.get(), "t", absl::StrCat("k", i), "v");
  }
  ASSERT_OK_AND_ASSIGN(auto raw, server->Command({"HLEN", "troupe:test:t"}));
  EXPECT_EQ(raw, std::vector<std::string>{std::to_string(kRows)});
}

TEST(RedisStoreClientTest, KeepsServingWhileRedisIsKilledAndRestarted) {
  SKIP_WITHOUT_REDIS();
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start({.password = "s3cret"}));
  RedisOptions options = OptionsFor(*server);
  std::atomic<bool> fatal{false};
  options.on_fatal = [&](const absl::Status&) { fatal = true; };
  ASSERT_OK_AND_ASSIGN(auto store, RedisStoreClient::Connect(options));

  std::atomic<int> written{0};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop) {
      const int i = written.load();
      PutBestEffort(store.get(), "t", absl::StrCat("k", i), absl::StrCat("v", i));
      written = i + 1;
      absl::SleepFor(absl::Milliseconds(1));
    }
  });
  ASSERT_TRUE(WaitUntil([&] { return written > 100; }, absl::Seconds(5), "100 writes"));
  ASSERT_OK(server->Kill());
  ASSERT_TRUE(WaitUntil([&] { return !store->connected(); }, absl::Seconds(5),
                        "the store to notice Redis is gone"));
  // Reads and best-effort writes keep working from memory while Redis is away.
  const int before = written;
  ASSERT_TRUE(WaitUntil([&] { return written > before + 100; }, absl::Seconds(5),
                        "writes to go on while Redis is away"));
  EXPECT_EQ(Get(*store, "t", "k1"), "v1");
  PutBestEffort(store.get(), "t", "while-away", "x");
  EXPECT_EQ(Get(*store, "t", "while-away"), "x");
  EXPECT_GT(store->queued_bytes(), 0);
  // An acknowledged write cannot be saved now: refused at once, saying why, and nothing changes.
  absl::StatusOr<bool> refused = Put(*store, "t", "refused", "y");
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_THAT(
      std::string(refused.status().message()),
      ::testing::HasSubstr("its Redis at " + server->address() + " has been unreachable for"));
  EXPECT_EQ(Get(*store, "t", "refused"), std::nullopt);
  absl::StatusOr<int64_t> not_deleted = Delete(*store, "t", "k1");
  EXPECT_TRUE(absl::IsUnavailable(not_deleted.status())) << not_deleted.status();
  EXPECT_EQ(Get(*store, "t", "k1"), "v1");

  ASSERT_OK(server->Restart());
  ASSERT_TRUE(WaitUntil([&] { return store->connected(); }, absl::Seconds(5),
                        "the store to reconnect"));
  stop = true;
  writer.join();
  ASSERT_OK(store->Flush(absl::Seconds(10)));
  EXPECT_FALSE(fatal);
  const int total = written;
  store.reset();

  ASSERT_OK_AND_ASSIGN(auto fresh, RedisStoreClient::Connect(OptionsFor(*server)));
  StoreClient::Rows rows = Scan(*fresh, "t", "k");
  EXPECT_EQ(rows.size(), total);
  for (int i = 0; i < total; ++i) {
    ASSERT_EQ(rows[absl::StrCat("k", i)], absl::StrCat("v", i)) << "row " << i;
  }
  EXPECT_EQ(Get(*fresh, "t", "while-away"), "x");
  EXPECT_EQ(Get(*fresh, "t", "refused"), std::nullopt);
}

TEST(RedisStoreClientTest, HungRedisCountsAsAwayUntilItAnswersAgain) {
  SKIP_WITHOUT_REDIS();
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start());
  RedisOptions options = OptionsFor(*server);
  options.command_timeout = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(auto store, RedisStoreClient::Connect(options));
  ASSERT_OK(Put(*store, "t", "before", "1"));
  ASSERT_OK(server->Pause());
  // An acknowledged write sent to the hung Redis: never acknowledged, so never reported saved
  // (Unavailable once the command times out); it stays queued and reaches Redis later.
  absl::StatusOr<bool> unacknowledged = Put(*store, "t", "during", "2");
  EXPECT_TRUE(absl::IsUnavailable(unacknowledged.status())) << unacknowledged.status();
  EXPECT_THAT(std::string(unacknowledged.status().message()),
              ::testing::HasSubstr("did not acknowledge the write"));
  ASSERT_TRUE(WaitUntil([&] { return !store->connected(); }, absl::Seconds(5),
                        "the store to time out on the paused Redis"));
  // While away: acknowledged writes are refused; best-effort ones wait in the queue.
  EXPECT_TRUE(absl::IsUnavailable(Put(*store, "t", "refused", "x").status()));
  PutBestEffort(store.get(), "t", "while-away", "3");
  EXPECT_EQ(store->Flush(absl::Milliseconds(100)).code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_OK(server->Resume());
  ASSERT_OK(store->Flush(absl::Seconds(10)));
  EXPECT_TRUE(store->connected());
  ASSERT_OK_AND_ASSIGN(auto raw, server->Command({"HGETALL", "troupe:test:t"}));
  EXPECT_THAT(raw, ::testing::UnorderedElementsAre("before", "1", "during", "2", "while-away", "3"));
}

TEST(RedisStoreClientTest, GivesUpWhenRedisStaysAway) {
  SKIP_WITHOUT_REDIS();
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start());
  RedisOptions options = OptionsFor(*server);
  options.give_up_after = absl::Seconds(1);
  absl::Notification fatal;
  absl::Status fatal_status;
  options.on_fatal = [&](const absl::Status& status) {
    fatal_status = status;
    fatal.Notify();
  };
  ASSERT_OK_AND_ASSIGN(auto store, RedisStoreClient::Connect(options));
  ASSERT_OK(server->Kill());
  const absl::Time killed = absl::Now();
  PutBestEffort(store.get(), "t", "k", "v");
  ASSERT_TRUE(fatal.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_GE(absl::Now() - killed, absl::Seconds(1));
  EXPECT_TRUE(absl::IsUnavailable(fatal_status)) << fatal_status;
  EXPECT_THAT(std::string(fatal_status.message()),
              ::testing::HasSubstr(absl::StrCat("Redis at ", server->address(),
                                                " has been away for")));
  // After giving up: reads still work; writes report the error.
  EXPECT_EQ(Get(*store, "t", "k"), "v");
  EXPECT_EQ(Put(*store, "t", "k2", "v").status(), fatal_status);
  EXPECT_EQ(store->Flush(absl::Seconds(1)), fatal_status);
}

TEST(RedisStoreClientTest, QueueOverflowIsFatal) {
  SKIP_WITHOUT_REDIS();
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start());
  RedisOptions options = OptionsFor(*server);
  options.max_queued_bytes = 64 << 10;
  absl::Notification fatal;
  absl::Status fatal_status;
  options.on_fatal = [&](const absl::Status& status) {
    fatal_status = status;
    fatal.Notify();
  };
  ASSERT_OK_AND_ASSIGN(auto store, RedisStoreClient::Connect(options));
  ASSERT_OK(server->Kill());
  PutBestEffort(store.get(), "t", "first", "v");
  ASSERT_TRUE(WaitUntil([&] { return !store->connected(); }, absl::Seconds(5),
                        "the store to notice Redis is gone"));
  const std::string kilobyte(1024, 'x');
  for (int i = 0; i < 100; ++i) PutBestEffort(store.get(), "t", absl::StrCat("k", i), kilobyte);
  ASSERT_TRUE(fatal.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(absl::IsResourceExhausted(fatal_status)) << fatal_status;
  EXPECT_THAT(std::string(fatal_status.message()),
              ::testing::HasSubstr("bytes of writes are waiting for Redis"));
}

TEST(RedisStoreClientTest, PasswordErrorsSayWhatIsWrong) {
  SKIP_WITHOUT_REDIS();
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start({.password = "right"}));
  RedisOptions options = OptionsFor(*server);
  EXPECT_OK(CheckRedis(options));

  options.password = "wrong";
  absl::Status status = CheckRedis(options);
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("rejected the username/password"));
  EXPECT_TRUE(absl::IsPermissionDenied(RedisStoreClient::Connect(options).status()));

  options.password = "";
  status = CheckRedis(options);
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("requires authentication"));

  ASSERT_OK_AND_ASSIGN(auto open_server, RedisServer::Start());
  RedisOptions needless = OptionsFor(*open_server);
  needless.password = "unneeded";
  status = CheckRedis(needless);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("has no password set"));
}

TEST(RedisStoreClientTest, AclUserWorks) {
  SKIP_WITHOUT_REDIS();
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start({.password = "admin"}));
  ASSERT_OK(server->AddAclUser("troupe", "pw"));
  RedisOptions options = OptionsFor(*server);
  options.username = "troupe";
  options.password = "pw";
  {
    ASSERT_OK_AND_ASSIGN(auto store, RedisStoreClient::Connect(options));
    ASSERT_OK(Put(*store, "t", "k", "v"));
  }
  ASSERT_OK_AND_ASSIGN(auto store, RedisStoreClient::Connect(options));
  EXPECT_EQ(Get(*store, "t", "k"), "v");

  options.password = "nope";
  absl::Status status = CheckRedis(options);
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  options.password = "";
  EXPECT_TRUE(absl::IsInvalidArgument(CheckRedis(options)));
}

TEST(RedisStoreClientTest, UnreachableAndBadAddresses) {
  RedisOptions options;
  options.key_prefix = "troupe:test";
  options.address = absl::StrCat("127.0.0.1:", UnusedPort());
  absl::Status status = CheckRedis(options);
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr(absl::StrCat("Redis at ", options.address, " is unreachable")));
  EXPECT_TRUE(absl::IsUnavailable(RedisStoreClient::Connect(options).status()));

  for (const char* bad : {"localhost", "localhost:", ":6379", "host:99999", "host:port"}) {
    options.address = bad;
    EXPECT_TRUE(absl::IsInvalidArgument(CheckRedis(options))) << bad;
  }
}

TEST(RedisStoreClientTest, SomethingThatIsNotRedis) {
  // A server that answers like HTTP.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  std::thread http([listener] {
    const int client = accept(listener, nullptr, nullptr);
    if (client < 0) return;
    char buffer[256];
    (void)!read(client, buffer, sizeof(buffer));
    const char kAnswer[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    (void)!write(client, kAnswer, sizeof(kAnswer) - 1);
    close(client);
  });
  RedisOptions options;
  options.address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  const absl::Status status = CheckRedis(options);
  http.join();
  close(listener);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("is it a Redis server?"));
}

TEST(RedisStoreClientTest, ClusterRecordRoundTrip) {
  SKIP_WITHOUT_REDIS();
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start({.password = "pw"}));
  const RedisOptions options = OptionsFor(*server);
  ASSERT_OK_AND_ASSIGN(auto missing, ReadClusterRecord(options, "default"));
  EXPECT_FALSE(missing.has_value());

  const ClusterRecord record{"00ff", Sha256Hex("the token")};
  ASSERT_OK(WriteClusterRecord(options, "default", record));
  ASSERT_OK_AND_ASSIGN(auto read, ReadClusterRecord(options, "default"));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->cluster_id_hex, "00ff");
  EXPECT_EQ(read->token_hash_hex, Sha256Hex("the token"));
  ASSERT_OK_AND_ASSIGN(auto raw, server->Command({"HGET", "troupe:cluster:default", "token_hash"}));
  EXPECT_EQ(raw, std::vector<std::string>{Sha256Hex("the token")});
  ASSERT_OK_AND_ASSIGN(auto other, ReadClusterRecord(options, "other"));
  EXPECT_FALSE(other.has_value());

  ASSERT_OK(server->Command({"HDEL", "troupe:cluster:default", "token_hash"}));
  EXPECT_TRUE(absl::IsDataLoss(ReadClusterRecord(options, "default").status()));
}

}  // namespace
}  // namespace troupe
