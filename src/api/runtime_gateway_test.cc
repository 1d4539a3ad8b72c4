// The threading contract of troupe/api.h, through the RuntimeGateway that Init opens and Shutdown
// closes: calls from many threads at once, Close racing them, and calls after Close. A fake
// session answers on the calling thread; a call can be held inside it to make races exact.
#include "src/api/runtime_gateway.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "troupe/api.h"

namespace troupe::internal {
namespace {

// Stores Put values; Get returns them. Counts calls inside it, and can hold one Get until told.
class FakeSession : public Runtime {
 public:
  explicit FakeSession(std::atomic<int>* destroyed_with_calls_inside)
      : destroyed_with_calls_inside_(destroyed_with_calls_inside) {}
  ~FakeSession() override {
    if (inside_.load() != 0) destroyed_with_calls_inside_->fetch_add(1);
  }

  // The next Get signals `entered` and waits for `release`.
  void HoldNextGet(absl::Notification* entered, absl::Notification* release) {
    absl::MutexLock lock(&mu_);
    hold_entered_ = entered;
    hold_release_ = release;
  }
  int live_refs() {
    absl::MutexLock lock(&mu_);
    return live_refs_;
  }

  RefInfo Put(size_t size, const std::function<void(char*)>& write, std::vector<RefInfo>) override {
    Inside inside(this);
    std::string bytes(size, '\0');
    write(bytes.data());
    absl::MutexLock lock(&mu_);
    RefInfo ref{std::to_string(next_id_++), "fake:0"};
    objects_[ref.object_id] = std::make_shared<std::string>(std::move(bytes));
    ++live_refs_;
    return ref;
  }
  std::vector<Buffer> Get(const std::vector<RefInfo>& refs, int64_t) override {
    Inside inside(this);
    absl::Notification* entered = nullptr;
    absl::Notification* release = nullptr;
    {
      absl::MutexLock lock(&mu_);
      std::swap(entered, hold_entered_);
      std::swap(release, hold_release_);
    }
    if (entered != nullptr) {
      entered->Notify();
      release->WaitForNotification();
    }
    absl::MutexLock lock(&mu_);
    std::vector<Buffer> out;
    for (const auto& ref : refs) {
      const auto& bytes = objects_.at(ref.object_id);
      out.push_back({bytes->data(), bytes->size(), bytes});
    }
    return out;
  }
  void RecordMetric(const MetricSpec&, double, const std::map<std::string, std::string>&) override {
  }
  std::vector<bool> Wait(const std::vector<RefInfo>& refs, int, int64_t, bool) override {
    Inside inside(this);
    return std::vector<bool>(refs.size(), true);
  }
  void AddLocalRef(const RefInfo&) override {
    absl::MutexLock lock(&mu_);
    ++live_refs_;
  }
  void RemoveLocalRef(const std::string&) override {
    absl::MutexLock lock(&mu_);
    --live_refs_;
  }

  std::vector<RefInfo> SubmitTask(const std::string&, std::vector<TaskArgument>,
                                  const TaskOptions&) override {
    throw TroupeError("not in this fake");
  }
  void Cancel(const RefInfo&, bool, bool) override {}
  bool IsCancelled() override { return false; }
  std::string CreateActor(const std::string&, std::vector<TaskArgument>,
                          const ActorOptions&) override {
    throw TroupeError("not in this fake");
  }
  std::vector<RefInfo> SubmitActorTask(const std::string&, const std::string&,
                                       std::vector<TaskArgument>,
                                       const troupe::internal::ActorCallOptions&) override {
    throw TroupeError("not in this fake");
  }
  void ReportStreamItem(size_t, const std::function<void(char*)>&, std::vector<RefInfo>) override {
    throw troupe::TroupeError("streams need a real cluster (tests/returns_test.cc)");
  }
  std::optional<RefInfo> NextStreamItem(const RefInfo&, int64_t) override {
    throw troupe::TroupeError("streams need a real cluster");
  }
  int64_t NumUnreadStreamItems(const RefInfo&) override { return 0; }
  void KillActor(const std::string&, bool) override {}
  std::string GetNamedActor(const std::string&, const std::string&) override { return ""; }
  void ExitActor() override {}
  bool WasCurrentActorRestarted() override { return false; }
  std::string CreatePlacementGroup(const PlacementGroupSpec&) override { return ""; }
  void RemovePlacementGroup(const std::string&) override {}
  bool WaitPlacementGroup(const std::string&, int64_t) override { return false; }
  std::string GetPlacementGroup(const std::string&) override { return ""; }
  std::vector<PlacementGroupInfo> ListPlacementGroups() override { return {}; }
  std::optional<PlacementGroupInfo> GetPlacementGroupInfo(const std::string&) override {
    return std::nullopt;
  }
  std::optional<std::string> KvGet(const std::string&, const std::string&) override {
    return std::nullopt;
  }
  bool KvPut(const std::string&, const std::string&, const std::string&, bool) override {
    return true;
  }
  int64_t KvDelete(const std::string&, const std::string&, bool) override { return 0; }
  bool KvExists(const std::string&, const std::string&) override { return false; }
  std::vector<std::string> KvKeys(const std::string&, const std::string&) override { return {}; }
  std::string JobNamespace() override { return "job-test"; }
  std::string CurrentActorId() override { return ""; }
  std::string NodeIp() override { return "127.0.0.1"; }
  troupe::RuntimeContext GetRuntimeContext() override { return {}; }
  std::vector<troupe::NodeInfo> Nodes() override { return {}; }

 private:
  struct Inside {
    explicit Inside(FakeSession* session) : session(session) { ++session->inside_; }
    ~Inside() { --session->inside_; }
    FakeSession* session;
  };

  std::atomic<int>* const destroyed_with_calls_inside_;
  std::atomic<int> inside_{0};
  absl::Mutex mu_;
  int next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int live_refs_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::shared_ptr<std::string>> objects_ ABSL_GUARDED_BY(mu_);
  absl::Notification* hold_entered_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Notification* hold_release_ ABSL_GUARDED_BY(mu_) = nullptr;
};

class RuntimeGatewayTest : public ::testing::Test {
 protected:
  ~RuntimeGatewayTest() override { gateway_.Close(); }
  std::atomic<int> destroyed_with_calls_inside_{0};
  RuntimeGateway gateway_;
};

TEST_F(RuntimeGatewayTest, CallsAfterCloseThrowRuntimeErrorAndRefsBecomeNoOps) {
  auto session = std::make_shared<FakeSession>(&destroyed_with_calls_inside_);
  gateway_.Open(session);
  ASSERT_EQ(CurrentRuntime(), &gateway_);
  ObjectRef<int> ref = Put(7);
  EXPECT_EQ(*troupe::Get(ref), 7);
  EXPECT_EQ(session->live_refs(), 1);

  gateway_.Close();
  EXPECT_EQ(CurrentRuntime(), nullptr);
  EXPECT_THROW(troupe::Get(ref), RuntimeError);  // "not initialized"
  EXPECT_THROW(Put(1), RuntimeError);
  // A caller that read the gateway's pointer before Close gets RuntimeError, not a crash.
  EXPECT_THROW(gateway_.Get({ref.info()}, -1), RuntimeError);
  EXPECT_THROW(gateway_.Wait({ref.info()}, 1, -1, true), RuntimeError);
  // ObjectRefs outlive the session: copying and dropping them touches nothing.
  ObjectRef<int> copy = ref;
  copy = ObjectRef<int>();
  gateway_.AddLocalRef(ref.info());
  gateway_.RemoveLocalRef(ref.info().object_id);
  EXPECT_EQ(session->live_refs(), 1);
}

TEST_F(RuntimeGatewayTest, CloseDuringACallKeepsTheSessionAliveUntilTheCallReturns) {
  auto session = std::make_shared<FakeSession>(&destroyed_with_calls_inside_);
  std::weak_ptr<FakeSession> weak = session;
  gateway_.Open(session);
  ObjectRef<int> ref = Put(42);
  absl::Notification entered, release;
  session->HoldNextGet(&entered, &release);
  session.reset();  // the gateway's reference is the only one left

  int got = 0;
  std::thread caller([&] { got = *troupe::Get(ref); });
  entered.WaitForNotification();
  EXPECT_NE(gateway_.Close(), nullptr);  // what Shutdown does; does not wait for the call
  EXPECT_FALSE(weak.expired()) << "the call in flight holds the session";
  EXPECT_THROW(gateway_.Put(1, [](char* out) { *out = 0; }, {}), RuntimeError);
  release.Notify();
  caller.join();
  EXPECT_EQ(got, 42);
  ref = ObjectRef<int>();  // after Close: a no-op
  EXPECT_TRUE(weak.expired()) << "the last call out destroys the session";
  EXPECT_EQ(destroyed_with_calls_inside_.load(), 0);
}

TEST_F(RuntimeGatewayTest, ManyThreadsCallWhileCloseRacesThem) {
  constexpr int kThreads = 8;
  constexpr int kCallsBeforeClose = 200;
  auto session = std::make_shared<FakeSession>(&destroyed_with_calls_inside_);
  std::weak_ptr<FakeSession> weak = session;
  gateway_.Open(std::move(session));

  absl::Mutex mu;
  int threads_warmed_up = 0;
  std::atomic<int> stopped_by_runtime_error{0};
  std::atomic<int> other_failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0;; ++i) {
        try {
          ObjectRef<int> ref = Put(t * 1000000 + i);
          if (*troupe::Get(ref) != t * 1000000 + i) other_failures.fetch_add(1);
          troupe::Wait(std::vector<ObjectRef<int>>{ref}, 1);
        } catch (const RuntimeError&) {  // "shut down" or "not initialized": the contract
          stopped_by_runtime_error.fetch_add(1);
          return;
        } catch (...) {
          other_failures.fetch_add(1);
          return;
        }
        if (i == kCallsBeforeClose) {
          absl::MutexLock lock(&mu);
          ++threads_warmed_up;
        }
      }
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto all_running = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return threads_warmed_up == kThreads;
    };
    mu.Await(absl::Condition(&all_running));
  }
  gateway_.Close();  // while every thread is mid-loop
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(stopped_by_runtime_error.load(), kThreads);
  EXPECT_EQ(other_failures.load(), 0);
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(destroyed_with_calls_inside_.load(), 0);
}

}  // namespace
}  // namespace troupe::internal
