#include "src/core_worker/memory_store.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace troupe {
namespace {

ObjectId NewId() { return ObjectId::FromIndex(TaskId::FromRandom(), 1); }

StoredObject Inline(const std::string& bytes) {
  StoredObject object;
  object.value.set_inline_value(bytes);
  return object;
}

TEST(MemoryStoreTest, WaitBlocksUntilPut) {
  MemoryStore store;
  ObjectId id = NewId();
  std::thread producer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    store.Put(id, Inline("x"));
  });
  auto object = store.Wait(id, absl::InfiniteFuture());
  producer.join();
  ASSERT_TRUE(object);
  EXPECT_EQ(object->value.inline_value(), "x");
  EXPECT_FALSE(store.Wait(NewId(), absl::Now() + absl::Milliseconds(5)));
}

TEST(MemoryStoreTest, CallbacksRunOnPutOrExpire) {
  MemoryStore store;
  ObjectId ready_later = NewId(), never = NewId();
  int fired = 0, expired = 0;
  store.OnReady(ready_later, absl::InfiniteFuture(),
                [&](std::optional<StoredObject> o) { fired += o.has_value(); });
  store.OnReady(never, absl::Now(), [&](std::optional<StoredObject> o) { expired += !o; });
  store.Put(ready_later, Inline("y"));
  store.ExpireWaiters(absl::Now() + absl::Seconds(1));
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(expired, 1);
  int immediate = 0;
  store.OnReady(ready_later, absl::InfiniteFuture(), [&](auto o) { immediate += o.has_value(); });
  EXPECT_EQ(immediate, 1);
}

TEST(MemoryStoreTest, OnlyCallbacksWithADeadlineNeedTheTimer) {
  MemoryStore store;
  int told = 0;
  store.SetTimedWaiterListener([&] { ++told; });
  ObjectId a = NewId(), b = NewId(), c = NewId(), d = NewId();
  auto ignore = [](std::optional<StoredObject>) {};
  store.OnReady(a, absl::InfiniteFuture(), ignore);  // no deadline: nothing to expire
  EXPECT_FALSE(store.HasTimedWaiters());
  EXPECT_EQ(told, 0);
  store.OnReady(b, absl::Now() + absl::Hours(1), ignore);
  const uint64_t cancel = store.OnReady(c, absl::Now() + absl::Hours(1), ignore);
  store.OnReady(d, absl::Now() + absl::Seconds(1), ignore);
  EXPECT_EQ(told, 3);
  EXPECT_TRUE(store.HasTimedWaiters());
  store.Put(b, Inline("b"));        // answered
  store.CancelOnReady(c, cancel);   // dropped
  EXPECT_TRUE(store.HasTimedWaiters());
  store.ExpireWaiters(absl::Now() + absl::Seconds(2));  // expired
  EXPECT_FALSE(store.HasTimedWaiters());
  store.Put(a, Inline("a"));
  EXPECT_FALSE(store.HasTimedWaiters());
  store.OnReady(a, absl::Now() + absl::Hours(1), ignore);  // ready already: runs at once
  EXPECT_FALSE(store.HasTimedWaiters());
  EXPECT_EQ(told, 3);
}

// Each callback expires at its own deadline, not before: also one registered after a later one,
// and a later one after the earliest was cancelled (the store's "next deadline" is a hint).
TEST(MemoryStoreTest, CallbacksExpireAtTheirOwnDeadlines) {
  MemoryStore store;
  const absl::Time t0 = absl::Now();
  std::vector<std::string> expired;
  auto expire_as = [&](std::string name) {
    return [&expired, name](std::optional<StoredObject> o) {
      if (!o) expired.push_back(name);
    };
  };
  store.OnReady(NewId(), t0 + absl::Seconds(20), expire_as("20"));
  store.ExpireWaiters(t0 + absl::Seconds(5));
  store.OnReady(NewId(), t0 + absl::Seconds(10), expire_as("10"));  // earlier than the first
  const ObjectId cancelled = NewId();
  const uint64_t handle = store.OnReady(cancelled, t0 + absl::Seconds(12), expire_as("12"));
  store.OnReady(NewId(), t0 + absl::Seconds(15), expire_as("15"));
  store.ExpireWaiters(t0 + absl::Seconds(9));
  EXPECT_TRUE(expired.empty());
  store.ExpireWaiters(t0 + absl::Seconds(10));
  EXPECT_EQ(expired, std::vector<std::string>{"10"});
  store.CancelOnReady(cancelled, handle);
  store.ExpireWaiters(t0 + absl::Seconds(12));  // the cancelled one was next: nothing is due
  store.ExpireWaiters(t0 + absl::Seconds(14));
  EXPECT_EQ(expired, std::vector<std::string>{"10"});
  store.ExpireWaiters(t0 + absl::Seconds(16));
  EXPECT_EQ(expired, (std::vector<std::string>{"10", "15"}));
  EXPECT_TRUE(store.HasTimedWaiters());
  store.ExpireWaiters(t0 + absl::Seconds(20));
  EXPECT_EQ(expired, (std::vector<std::string>{"10", "15", "20"}));
  EXPECT_FALSE(store.HasTimedWaiters());
}

TEST(MemoryStoreTest, WaitManyReturnsOnceEnoughAreReady) {
  MemoryStore store;
  std::vector<ObjectId> ids = {NewId(), NewId(), NewId()};
  store.Put(ids[1], Inline("a"));
  auto ready = store.WaitMany(ids, 1, absl::InfiniteFuture());
  EXPECT_EQ(ready, (std::vector<bool>{false, true, false}));
  ready = store.WaitMany(ids, 3, absl::Now() + absl::Milliseconds(5));
  EXPECT_EQ(ready, (std::vector<bool>{false, true, false}));
}

TEST(MemoryStoreTest, CopiesAreRecordedOnce) {
  MemoryStore store;
  ObjectId id = NewId();
  store.Put(id, Inline("z"));
  store.AddCopy(id, "10.0.0.1:1");
  store.AddCopy(id, "10.0.0.1:1");
  EXPECT_EQ(store.GetIfReady(id)->copy_raylet_addresses.size(), 1u);
  store.Erase(id);
  EXPECT_EQ(store.size(), 0u);
}

TEST(MemoryStoreTest, CancelledCallbackNeverRuns) {
  MemoryStore store;
  ObjectId id = NewId();
  int kept = 0, cancelled = 0;
  const uint64_t keep =
      store.OnReady(id, absl::InfiniteFuture(), [&](std::optional<StoredObject>) { ++kept; });
  const uint64_t drop =
      store.OnReady(id, absl::InfiniteFuture(), [&](std::optional<StoredObject>) { ++cancelled; });
  EXPECT_NE(keep, drop);
  store.CancelOnReady(id, drop);
  store.Put(id, Inline("z"));
  EXPECT_EQ(kept, 1);
  EXPECT_EQ(cancelled, 0);
  // Already ready: runs at once and there is nothing to cancel.
  EXPECT_EQ(store.OnReady(id, absl::InfiniteFuture(), [&](std::optional<StoredObject>) { ++kept; }),
            0u);
  EXPECT_EQ(kept, 2);
}

}  // namespace
}  // namespace troupe
