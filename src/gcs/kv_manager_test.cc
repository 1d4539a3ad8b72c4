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

// A store that cannot make a delete durable (Redis unreachable): it refuses, changing nothing.
class RefusingDeletesStore : public InMemoryStoreClient {
 public:
  void AsyncDelete(const std::string& table, const std::string& key,
                   std::function<void(absl::StatusOr<int64_t>)> done) override {
    if (key.find("refused") != std::string::npos) {
      done(absl::UnavailableError("Redis is unreachable"));
      return;
    }
    InMemoryStoreClient::AsyncDelete(table, key, std::move(done));
  }
};

TEST(KvManagerDurabilityTest, DeleteByPrefixReportsADeleteTheStoreRefused) {
  RefusingDeletesStore store;
  KvManager kv(&store);
  for (const char* key : {"job/a", "job/refused"}) {
    Result<bool> added;
    kv.Put("ns", key, "v", true, added.callback());
    ASSERT_TRUE(added.value.ok());
  }
  Result<int64_t> deleted;
  kv.Del("ns", "job/", /*by_prefix=*/true, deleted.callback());
  EXPECT_TRUE(absl::IsUnavailable(deleted.value.status())) << deleted.value.status();
  Result<std::optional<std::string>> kept;
  kv.Get("ns", "job/refused", kept.callback());
  ASSERT_TRUE(kept.value.ok());
  EXPECT_EQ(*kept.value, std::optional<std::string>("v"));
}

}  // namespace
}  // namespace troupe
