// Multiple returns (SetNumReturns<N>: one ObjectRef per element of a returned std::tuple) and
// streaming generators (StreamWriter / ObjectRefStream) on real clusters started by TestCluster:
// each return is its own object, freed and rebuilt by lineage on its own; a stream's items are
// read as they are produced. This binary is also the worker program: raylets start it in worker
// mode, where main() hands over to troupe::Init before any test runs.
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "src/rpc/raylet_client.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"

namespace {

using troupe::testing::Driver;
using troupe::testing::TestCluster;
using troupe::testing::WaitUntil;
using Bytes = std::vector<uint8_t>;

Bytes MakeBytes(int64_t size, int seed) {
  Bytes bytes(size);
  uint64_t state = static_cast<uint64_t>(seed) * 2654435761u + 1;
  for (auto& b : bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(state >> 56);
  }
  return bytes;
}

uint64_t ChecksumOf(const Bytes& bytes) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (uint8_t b : bytes) hash = (hash ^ b) * 1099511628211ull;
  return hash;
}

// Two large values (each goes to the object store on its own), seeds `seed` and `seed + 1`.
std::tuple<Bytes, Bytes> MakeTwo(int64_t size, int seed) {
  return {MakeBytes(size, seed), MakeBytes(size, seed + 1)};
}

std::tuple<int, std::string, std::vector<int>> Describe(int n) {
  return {n * 2, "n=" + std::to_string(n), std::vector<int>(n, 7)};
}

std::tuple<int, int> Throws(int code) {
  throw std::runtime_error("split boom " + std::to_string(code));
}

class Tally {
 public:
  static Tally* Create(int start) { return new Tally(start); }
  // The running total and how many calls made it.
  std::tuple<int, int> Add(int x) {
    total_ += x;
    return {total_, ++calls_};
  }

 private:
  explicit Tally(int start) : total_(start) {}
  int total_;
  int calls_ = 0;
};

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Writes `text` to `path` at once (readers never see a partial file).
void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp") << text;
  rename((path + ".tmp").c_str(), path.c_str());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  return text;
}

// Yields 0, then waits (at most 60 s) for the file `gate` that the test creates, then yields
// 1..n-1.
void CountAfterGate(troupe::StreamWriter<int>& out, int n, std::string gate) {
  out.Yield(0);
  for (int i = 0; i < 6000 && !Exists(gate); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int i = 1; i < n; ++i) out.Yield(i);
}

// Yields 0..n-1; after each Yield returns, writes how many have to `count_file`.
void CountAndRecord(troupe::StreamWriter<int>& out, int n, std::string count_file) {
  for (int i = 0; i < n; ++i) {
    out.Yield(i);
    WriteFile(count_file, std::to_string(i + 1));
  }
}

void ThrowAfter(troupe::StreamWriter<std::string>& out, int n) {
  for (int i = 0; i < n; ++i) out.Yield("item " + std::to_string(i));
  throw std::runtime_error("generator broke after " + std::to_string(n));
}

// Yields 1 and 2, writes its pid to `pid_file`, then waits to be killed (at most 60 s).
void YieldThenHang(troupe::StreamWriter<int>& out, std::string pid_file) {
  out.Yield(1);
  out.Yield(2);
  WriteFile(pid_file, std::to_string(getpid()));
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

// Yields large chunks (object store) with seeds seed, seed + 1, ...
void Chunks(troupe::StreamWriter<Bytes>& out, int n, int64_t size, int seed) {
  for (int i = 0; i < n; ++i) out.Yield(MakeBytes(size, seed + i));
}

// Yields forever; once its Yield throws (the stream was cancelled) it writes `stopped_file`.
void Endless(troupe::StreamWriter<int>& out, std::string stopped_file) {
  struct OnExit {
    std::string path;
    ~OnExit() { WriteFile(path, "stopped"); }
  } on_exit{stopped_file};
  for (int i = 0; i < 1000000; ++i) out.Yield(i);
}

class Lines {
 public:
  static Lines* Create(std::string prefix) { return new Lines(std::move(prefix)); }
  void Emit(troupe::StreamWriter<std::string>& out, int n) {
    for (int i = 0; i < n; ++i) out.Yield(prefix_ + std::to_string(i));
  }

 private:
  explicit Lines(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string prefix_;
};

TROUPE_REMOTE(MakeTwo, Describe, Throws, Tally::Create, &Tally::Add, CountAfterGate, CountAndRecord,
              ThrowAfter, YieldThenHang, Chunks, Endless, Lines::Create, &Lines::Emit);

std::string TempDir() {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/streams-", getpid(), "-",
                                 std::chrono::steady_clock::now().time_since_epoch().count());
  mkdir(dir.c_str(), 0755);
  return dir;
}

int64_t StoreBytesUsedEverywhere(TestCluster& cluster) {
  int64_t total = 0;
  const nlohmann::json status = cluster.Status();
  for (const auto& node : status["nodes"]) {
    if (node.value("state", std::string("ALIVE")) != "ALIVE") continue;
    troupe::RayletClient raylet(
        absl::StrCat(node["node_ip"].get<std::string>(), ":", node["raylet_port"].get<int>()),
        cluster.token());
    auto stats = raylet.GetNodeStats();
    if (!stats.ok()) return -1;
    total += stats->object_store().used_bytes();
  }
  return total;
}

void KillNode(TestCluster& cluster, const std::string& node) {
  const int raylet_pid = troupe::testing::FindNode(cluster.Status(), node)["raylet_pid"];
  ASSERT_EQ(kill(raylet_pid, SIGKILL), 0);
}

// Two nodes offer "pin"; the task prefers `doomed`, so it runs there first and on the other
// node when it runs again.
std::tuple<troupe::ObjectRef<Bytes>, troupe::ObjectRef<Bytes>> MakeTwoOn(const std::string& doomed,
                                                                         int64_t size, int seed) {
  return troupe::Task(MakeTwo)
      .SetResources({{"CPU", 1}, {"pin", 1}})
      .SetSchedulingStrategy(troupe::NodeAffinity{doomed, /*soft=*/true})
      .SetNumReturns<2>()
      .Remote(size, seed);
}

TEST(ReturnsTest, TasksAndActorCallsSplitTheirTupleIntoTypedRefs) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto [twice, label, sevens] = troupe::Task(Describe).SetNumReturns<3>().Remote(3);
  EXPECT_EQ(*troupe::Get(twice), 6);
  EXPECT_EQ(*troupe::Get(label), "n=3");
  EXPECT_EQ(*troupe::Get(sevens), (std::vector<int>{7, 7, 7}));
  // The plain call still gives one ref to the whole tuple.
  EXPECT_EQ(*troupe::Get(troupe::Task(Describe).Remote(1)),
            std::make_tuple(2, std::string("n=1"), std::vector<int>{7}));
  // A split ref passed on to another task is an argument like any other.
  auto [first, second] = troupe::Task(MakeTwo).SetNumReturns<2>().Remote(16, 4);
  EXPECT_EQ(ChecksumOf(*troupe::Get(second)), ChecksumOf(MakeBytes(16, 5)));

  auto tally = troupe::Actor(Tally::Create).Remote(10);
  auto [total, calls] = tally.Task(&Tally::Add).SetNumReturns<2>().Remote(5);
  EXPECT_EQ(*troupe::Get(total), 15);
  EXPECT_EQ(*troupe::Get(calls), 1);
  EXPECT_EQ(*troupe::Get(tally.Task(&Tally::Add).Remote(1)), std::make_tuple(16, 2));

  // An exception fails every return with it.
  auto [a, b] = troupe::Task(Throws).SetNumReturns<2>().Remote(7);
  for (const auto* ref : {&a, &b}) {
    try {
      troupe::Get(*ref);
      ADD_FAILURE() << "expected TaskError";
    } catch (const troupe::TaskError& e) {
      EXPECT_TRUE(absl::StrContains(e.what(), "split boom 7")) << e.what();
    }
  }
}

TEST(ReturnsTest, FreeingOneReturnLeavesTheOtherReadable) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  constexpr int64_t kSize = 1 << 20;  // past the inline limit: both live in the object store
  auto [kept, dropped] = troupe::Task(MakeTwo).SetNumReturns<2>().Remote(kSize, 21);
  troupe::Wait(std::vector<troupe::ObjectRef<Bytes>>{kept, dropped}, 2);
  EXPECT_GE(StoreBytesUsedEverywhere(cluster), 2 * kSize);
  dropped = troupe::ObjectRef<Bytes>();  // its last reference
  int64_t used = -1;
  EXPECT_TRUE(WaitUntil([&] { return (used = StoreBytesUsedEverywhere(cluster)) < 2 * kSize; },
                        absl::Seconds(10), "the dropped return to be freed"))
      << used << " bytes used";
  EXPECT_GE(used, kSize);  // the other one is still there
  EXPECT_EQ(ChecksumOf(*troupe::Get(kept)), ChecksumOf(MakeBytes(kSize, 21)));
  kept = troupe::ObjectRef<Bytes>();
  EXPECT_TRUE(WaitUntil([&] { return (used = StoreBytesUsedEverywhere(cluster)) == 0; },
                        absl::Seconds(10), "the other return to be freed"))
      << used << " bytes used";
}

// The node holding both returns dies: each is rebuilt by running the task again, once.
TEST(ReturnsTest, ReturnsLostWithTheirNodeAreRebuiltByLineage) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  Driver driver(cluster);
  auto [a, b] = MakeTwoOn(doomed, 1 << 20, 31);
  troupe::Wait(std::vector<troupe::ObjectRef<Bytes>>{a, b}, 2);
  KillNode(cluster, doomed);
  EXPECT_EQ(ChecksumOf(*troupe::Get(b, std::chrono::seconds(60))),
            ChecksumOf(MakeBytes(1 << 20, 32)));
  EXPECT_EQ(ChecksumOf(*troupe::Get(a, std::chrono::seconds(60))),
            ChecksumOf(MakeBytes(1 << 20, 31)));
}

// Regression: the task's lineage went with the first of its returns to be freed, so a lost
// sibling could no longer be rebuilt.
TEST(ReturnsTest, AReturnIsRebuiltAfterItsSiblingWasFreed) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1", R"(--resources={"pin": 1})"}));
  Driver driver(cluster);
  auto [kept, dropped] = MakeTwoOn(doomed, 1 << 20, 41);
  troupe::Wait(std::vector<troupe::ObjectRef<Bytes>>{kept, dropped}, 2);
  dropped = troupe::ObjectRef<Bytes>();
  KillNode(cluster, doomed);
  EXPECT_EQ(ChecksumOf(*troupe::Get(kept, std::chrono::seconds(60))),
            ChecksumOf(MakeBytes(1 << 20, 41)));
}

// Issue 34 item 3, streaming generators: the first item is readable while the generator is
// still held up by something the test controls (it cannot have finished).
TEST(StreamsTest, ItemsArriveBeforeTheGeneratorEnds) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  const std::string gate = TempDir() + "/gate";
  troupe::ObjectRefStream<int> stream = troupe::Task(CountAfterGate).Remote(3, gate);
  std::optional<troupe::ObjectRef<int>> first = stream.Next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*troupe::Get(*first), 0);
  // No second item until the gate opens: Next's timeout form gives up, the stream stays usable.
  EXPECT_THROW(stream.Next(std::chrono::milliseconds(200)), troupe::GetTimeoutError);
  EXPECT_EQ(stream.NumReady(), 0);
  WriteFile(gate, "open");
  std::vector<int> rest;
  for (troupe::ObjectRef<int> ref : stream) rest.push_back(*troupe::Get(ref));
  EXPECT_EQ(rest, (std::vector<int>{1, 2}));
  EXPECT_FALSE(stream.Next().has_value());

  // An actor method can be a generator too.
  auto lines = troupe::Actor(Lines::Create).Remote(std::string("line "));
  std::vector<std::string> emitted;
  for (auto ref : lines.Task(&Lines::Emit).Remote(3)) emitted.push_back(*troupe::Get(ref));
  EXPECT_EQ(emitted, (std::vector<std::string>{"line 0", "line 1", "line 2"}));
}

// With a bound of 2 unread items, the generator's third Yield does not return until the reader
// takes an item: its count of completed yields stays at 2 while item 3 already arrived.
TEST(StreamsTest, BackpressureHoldsTheProducerUntilTheReaderReads) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  const std::string count_file = TempDir() + "/count";
  auto stream = troupe::Task(CountAndRecord).SetStreamBackpressure(2).Remote(5, count_file);
  ASSERT_TRUE(WaitUntil([&] { return stream.NumReady() == 3; }, absl::Seconds(30),
                        "item 3 to arrive (its Yield held)"));
  EXPECT_EQ(ReadFile(count_file), "2");  // Yield #3 has not returned
  EXPECT_EQ(*troupe::Get(*stream.Next()), 0);
  EXPECT_TRUE(WaitUntil([&] { return ReadFile(count_file) == "3"; }, absl::Seconds(30),
                        "the producer to go on once an item was read"));
  std::vector<int> rest;
  for (auto ref : stream) rest.push_back(*troupe::Get(ref));
  EXPECT_EQ(rest, (std::vector<int>{1, 2, 3, 4}));
}

TEST(StreamsTest, AnExceptionMidStreamIsRaisedAfterTheItemsBeforeIt) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  auto stream = troupe::Task(ThrowAfter).Remote(3);
  std::vector<troupe::ObjectRef<std::string>> items;
  for (int i = 0; i < 3; ++i) items.push_back(*stream.Next());
  try {
    stream.Next();
    FAIL() << "expected TaskError";
  } catch (const troupe::TaskError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "generator broke after 3")) << e.what();
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*troupe::Get(items[i]), "item " + std::to_string(i));
}

TEST(StreamsTest, AKilledProducerFailsTheStreamAfterItsItems) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  const std::string pid_file = TempDir() + "/pid";
  auto stream = troupe::Task(YieldThenHang).SetMaxRetries(0).Remote(pid_file);
  auto one = stream.Next();
  auto two = stream.Next();
  ASSERT_TRUE(WaitUntil([&] { return Exists(pid_file); }, absl::Seconds(30), "the pid file"));
  ASSERT_EQ(kill(std::stoi(ReadFile(pid_file)), SIGKILL), 0);
  EXPECT_THROW(stream.Next(std::chrono::seconds(60)), troupe::TaskFailedError);
  EXPECT_EQ(*troupe::Get(*one), 1);
  EXPECT_EQ(*troupe::Get(*two), 2);
}

TEST(StreamsTest, AProducerOnAnotherNodeStreamsObjectStoreItems) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string far,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"far": 1})"}));
  Driver driver(cluster);
  constexpr int64_t kSize = 1 << 20;  // in the far node's object store
  auto stream = troupe::Task(Chunks).SetResources({{"CPU", 1}, {"far", 1}}).Remote(3, kSize, 50);
  int seed = 50;
  for (auto ref : stream)
    EXPECT_EQ(ChecksumOf(*troupe::Get(ref)), ChecksumOf(MakeBytes(kSize, seed++)));
  EXPECT_EQ(seed, 53);
}

// Items are not rebuilt: one whose only copy died with its node fails, saying why.
TEST(StreamsTest, ALostItemFailsSayingItemsAreNotRebuilt) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string far,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"far": 1})"}));
  Driver driver(cluster);
  auto stream = troupe::Task(Chunks).SetResources({{"CPU", 1}, {"far", 1}}).Remote(2, 1 << 20, 60);
  std::vector<troupe::ObjectRef<Bytes>> items;
  for (auto ref : stream) items.push_back(ref);  // not read: the only copies stay on `far`
  ASSERT_EQ(items.size(), 2u);
  KillNode(cluster, far);
  try {
    troupe::Get(items[1], std::chrono::seconds(60));
    FAIL() << "expected ObjectReconstructionFailedError";
  } catch (const troupe::ObjectReconstructionFailedError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), items[1].ID())) << e.what();
    EXPECT_TRUE(absl::StrContains(e.what(), "items of streaming generators are not rebuilt"))
        << e.what();
  }
}

TEST(StreamsTest, CancellingAStreamStopsTheProducer) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  Driver driver(cluster);
  const std::string stopped = TempDir() + "/stopped";
  auto stream = troupe::Task(Endless).SetStreamBackpressure(1).Remote(stopped);
  EXPECT_EQ(*troupe::Get(*stream.Next()), 0);
  ASSERT_TRUE(WaitUntil([&] { return stream.NumReady() == 2; }, absl::Seconds(30),
                        "the producer to be held by backpressure"));
  troupe::Cancel(stream);
  // Held in Yield (nothing is read meanwhile), it stops: the cancel reached it there.
  EXPECT_TRUE(WaitUntil([&] { return Exists(stopped); }, absl::Seconds(30),
                        "the generator to stop (its Yield threw)"));
  // The items produced before the cancel come first; then the cancellation.
  bool cancelled = false;
  for (int i = 0; i < 10 && !cancelled; ++i) {
    try {
      if (!stream.Next(std::chrono::seconds(60))) break;
    } catch (const troupe::TaskCancelledError&) {
      cancelled = true;
    }
  }
  EXPECT_TRUE(cancelled);
}

}  // namespace

int main(int argc, char** argv) {
  // In worker mode this never returns: the raylet started this binary to run tasks.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
