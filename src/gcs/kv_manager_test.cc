#include "src/gcs/kv_manager.h"

#include "gtest/gtest.h"
#include "src/gcs/in_memory_store_client.h"

namespace troupe {
namespace {

// The in-memory store answers inline, so each call's result is ready when it returns.
template <typename T>
struct Result {
  absl::StatusOr<T> value = absl::UnknownError("not called");
  std::function<void(absl::StatusOr<T>)> callback() {
    return [this](absl::StatusOr<T> v) { value = std::move(v); };
  }
};

class KvManagerTest : public ::testing::Test {
 protected:
  bool Put(const std::string& ns, const std::string& key, const std::string& value,
           bool overwrite = true) {
    Result<bool> added;
    kv_.Put(ns, key, value, overwrite, added.callback());
    EXPECT_TRUE(added.value.ok());
    return *added.value;
  }
  std::optional<std::string> Get(const std::string& ns, const std::string& key) {
    Result<std::optional<std::string>> got;
    kv_.Get(ns, key, got.callback());
    EXPECT_TRUE(got.value.ok());
    return *got.value;
  }
  std::vector<std::string> Keys(const std::string& ns, const std::string& prefix) {
    Result<std::vector<std::string>> keys;
    kv_.Keys(ns, prefix, keys.callback());
    return *keys.value;
  }

  InMemoryStoreClient store_;
  KvManager kv_{&store_};
};

TEST_F(KvManagerTest, PutGetAndOverwrite) {
  EXPECT_TRUE(Put("ns", "k", "v1"));
  EXPECT_EQ(Get("ns", "k"), "v1");
  EXPECT_FALSE(Put("ns", "k", "v2", /*overwrite=*/false));
  EXPECT_EQ(Get("ns", "k"), "v1");
  EXPECT_FALSE(Put("ns", "k", "v2", /*overwrite=*/true));
  EXPECT_EQ(Get("ns", "k"), "v2");
  EXPECT_EQ(Get("ns", "missing"), std::nullopt);
}

TEST_F(KvManagerTest, NamespacesAreIsolatedEvenWhenNamesShareAPrefix) {
  Put("a", "bkey", "1");
  Put("ab", "key", "2");
  EXPECT_EQ(Get("a", "bkey"), "1");
  EXPECT_EQ(Get("ab", "key"), "2");
  EXPECT_EQ(Get("ab", "bkey"), std::nullopt);
  EXPECT_EQ(Keys("a", ""), std::vector<std::string>{"bkey"});
  EXPECT_EQ(Keys("ab", ""), std::vector<std::string>{"key"});
}

TEST_F(KvManagerTest, KeysByPrefixAreSorted) {
  Put("ns", "rank/2", "x");
  Put("ns", "rank/0", "x");
  Put("ns", "rank/1", "x");
  Put("ns", "other", "x");
  EXPECT_EQ(Keys("ns", "rank/"), (std::vector<std::string>{"rank/0", "rank/1", "rank/2"}));
}

TEST_F(KvManagerTest, ExistsAndDelete) {
  Put("ns", "k", "v");
  Result<bool> exists;
  kv_.Exists("ns", "k", exists.callback());
  EXPECT_TRUE(*exists.value);
  Result<int64_t> deleted;
  kv_.Del("ns", "k", false, deleted.callback());
  EXPECT_EQ(*deleted.value, 1);
  kv_.Exists("ns", "k", exists.callback());
  EXPECT_FALSE(*exists.value);
  kv_.Del("ns", "k", false, deleted.callback());
  EXPECT_EQ(*deleted.value, 0);
}

TEST_F(KvManagerTest, DeleteByPrefixLeavesOtherKeys) {
  Put("ns", "group/a", "1");
  Put("ns", "group/b", "2");
  Put("ns", "keep", "3");
  Put("other", "group/a", "4");
  Result<int64_t> deleted;
  kv_.Del("ns", "group/", true, deleted.callback());
  EXPECT_EQ(*deleted.value, 2);
  EXPECT_EQ(Keys("ns", ""), std::vector<std::string>{"keep"});
  EXPECT_EQ(Get("other", "group/a"), "4");
}

TEST_F(KvManagerTest, EmptyKeyIsRejected) {
  Result<bool> added;
  kv_.Put("ns", "", "v", true, added.callback());
  EXPECT_EQ(added.value.status().code(), absl::StatusCode::kInvalidArgument);
}

// Each entry is charged its stored key ("2:ns" + key) and value.
constexpr int64_t kOverhead = 4;

TEST(KvManagerQuotaTest, AWritePastTheQuotaIsRefusedSayingWhatToDo) {
  InMemoryStoreClient store;
  KvManager kv(&store, KvOptions{1000});
  Result<bool> first, second;
  kv.Put("ns", "a", std::string(600, 'x'), true, first.callback());
  ASSERT_TRUE(first.value.ok());
  kv.Put("ns", "b", std::string(600, 'y'), true, second.callback());
  ASSERT_EQ(second.value.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(second.value.status().message());
  EXPECT_NE(message.find("quota"), std::string::npos) << message;
  EXPECT_NE(message.find("1000B"), std::string::npos) << message;  // the quota
  EXPECT_NE(message.find("605B in use"), std::string::npos) << message;
  EXPECT_NE(message.find("--kv-quota"), std::string::npos) << message;
  Result<std::optional<std::string>> got;
  kv.Get("ns", "b", got.callback());
  EXPECT_EQ(*got.value, std::nullopt);  // nothing written
  EXPECT_EQ(kv.used_bytes(), 600 + 1 + kOverhead);
}

TEST(KvManagerQuotaTest, OverwritesAreChargedOnceAndDeletesFreeRoom) {
  InMemoryStoreClient store;
  KvManager kv(&store, KvOptions{1000});
  for (int i = 0; i < 4; ++i) {  // the same key again and again: one value's worth
    Result<bool> put;
    kv.Put("ns", "a", std::string(600, 'a' + i), true, put.callback());
    ASSERT_TRUE(put.value.ok()) << put.value.status();
  }
  EXPECT_EQ(kv.used_bytes(), 605);
  Result<bool> shrink;
  kv.Put("ns", "a", "small", true, shrink.callback());
  EXPECT_TRUE(shrink.value.ok());
  EXPECT_EQ(kv.used_bytes(), 5 + 1 + kOverhead);
  Result<bool> other;
  kv.Put("ns", "b", std::string(995, 'b'), true, other.callback());
  ASSERT_FALSE(other.value.ok());
  Result<int64_t> deleted;
  kv.Del("ns", "a", false, deleted.callback());
  EXPECT_EQ(*deleted.value, 1);
  EXPECT_EQ(kv.used_bytes(), 0);
  kv.Put("ns", "b", std::string(995, 'b'), true, other.callback());
  EXPECT_TRUE(other.value.ok()) << other.value.status();
  // Deleting by prefix frees the room too.
  kv.Del("ns", "", true, deleted.callback());
  EXPECT_EQ(*deleted.value, 1);
  EXPECT_EQ(kv.used_bytes(), 0);
}

TEST(KvManagerQuotaTest, ARestartedManagerCountsWhatTheStoreHolds) {
  InMemoryStoreClient store;
  {
    KvManager before(&store, KvOptions{1000});
    Result<bool> put;
    before.Put("ns", "a", std::string(600, 'a'), true, put.callback());
    ASSERT_TRUE(put.value.ok());
  }
  KvManager after(&store, KvOptions{1000});
  ASSERT_TRUE(after.Initialize().ok());
  EXPECT_EQ(after.used_bytes(), 605);
  Result<bool> exists;
  after.Exists("ns", "a", exists.callback());
  EXPECT_TRUE(*exists.value);
  Result<bool> put;
  after.Put("ns", "b", std::string(600, 'b'), true, put.callback());
  EXPECT_EQ(put.value.status().code(), absl::StatusCode::kResourceExhausted);
}

// A store that cannot make writes of some keys durable (Redis unreachable): it refuses them,
// changing nothing.
class RefusingStore : public InMemoryStoreClient {
 public:
  void AsyncPut(const std::string& table, const std::string& key, std::string value, bool overwrite,
                std::function<void(absl::StatusOr<bool>)> done) override {
    if (refuse_all || key.find("refused") != std::string::npos) {
      done(absl::UnavailableError("Redis is unreachable"));
      return;
    }
    InMemoryStoreClient::AsyncPut(table, key, std::move(value), overwrite, std::move(done));
  }
  void AsyncDelete(const std::string& table, const std::string& key,
                   std::function<void(absl::StatusOr<int64_t>)> done) override {
    if (refuse_all || key.find("refused") != std::string::npos) {
      done(absl::UnavailableError("Redis is unreachable"));
      return;
    }
    InMemoryStoreClient::AsyncDelete(table, key, std::move(done));
  }
  bool refuse_all = false;
};

TEST(KvManagerDurabilityTest, DeleteByPrefixReportsADeleteTheStoreRefused) {
  RefusingStore store;
  KvManager kv(&store);
  for (const char* key : {"job/a", "job/b"}) {
    Result<bool> added;
    kv.Put("ns", key, "v", true, added.callback());
    ASSERT_TRUE(added.value.ok());
  }
  store.refuse_all = true;
  Result<int64_t> deleted;
  kv.Del("ns", "job/", /*by_prefix=*/true, deleted.callback());
  EXPECT_TRUE(absl::IsUnavailable(deleted.value.status())) << deleted.value.status();
  store.refuse_all = false;
  // Nothing was deleted, and the manager still says so.
  Result<bool> exists;
  kv.Exists("ns", "job/b", exists.callback());
  ASSERT_TRUE(exists.value.ok());
  EXPECT_TRUE(*exists.value);
  Result<std::vector<std::string>> keys;
  kv.Keys("ns", "job/", keys.callback());
  ASSERT_TRUE(keys.value.ok());
  EXPECT_EQ(*keys.value, (std::vector<std::string>{"job/a", "job/b"}));
  EXPECT_EQ(kv.used_bytes(), 2 * (4 + 5 + 1));
}

// A refused write changes nothing: the key does not exist afterwards (a retry of a job
// submission with overwrite=false is not told "already exists"), and the quota is not charged.
TEST(KvManagerDurabilityTest, ARefusedPutLeavesNoTrace) {
  RefusingStore store;
  KvManager kv(&store);
  Result<bool> refused;
  kv.Put("ns", "refused-job", "record", /*overwrite=*/false, refused.callback());
  EXPECT_TRUE(absl::IsUnavailable(refused.value.status())) << refused.value.status();
  Result<bool> exists;
  kv.Exists("ns", "refused-job", exists.callback());
  ASSERT_TRUE(exists.value.ok());
  EXPECT_FALSE(*exists.value);
  EXPECT_EQ(kv.used_bytes(), 0);
  EXPECT_EQ(kv.SizeOf("ns", "refused-job"), std::nullopt);
}

}  // namespace
}  // namespace troupe
