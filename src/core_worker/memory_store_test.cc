#include "src/core_worker/memory_store.h"

#include <thread>

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
