// Collective groups of actors on real clusters (CPU backend): every operation x every type x
// sizes from 1 element to 64 MB against a reference each member computes itself; members joining
// late and in random order; a member SIGKILLed mid all-reduce; a member SIGSTOPped in a group
// declared with hang detection; re-creating a group; mismatched calls; rendezvous timeouts;
// driver-declared groups; nothing left behind in the KV or /dev/shm.
// Like the other cluster tests, this binary is also the worker program.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/collective/reduce.h"
#include "src/common/status_testing.h"
#include "src/common/test_seed.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"
#include "troupe/collective.h"

namespace {

namespace coll = troupe::collective;
using coll::DataType;
using coll::ReduceOp;

constexpr DataType kAllTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                                  DataType::kUInt8};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kAvg};

// --- Inputs and the reference ------------------------------------------------------------------
// Member r's element i is a small integer that every member can compute, so each member checks
// its own result without seeing the others' inputs. Values are chosen so that sums and products
// of up to 8 members are exact in every type (products: powers of two, or 1..3 for u8).

double InputValue(uint32_t seed, int rank, size_t index, DataType dtype, ReduceOp op) {
  uint64_t h = seed * 0x9E3779B97F4A7C15ull ^ (rank + 1) * 0xBF58476D1CE4E5B9ull ^
               (index + 7) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  h *= 0xD6E8FEB86CD8B5ADull;
  h ^= h >> 29;
  const bool unsigned_type = dtype == DataType::kUInt8;
  if (op == ReduceOp::kProduct) {
    static constexpr double kSigned[] = {1, 2, -1}, kUnsigned[] = {1, 2, 3};
    return unsigned_type ? kUnsigned[h % 3] : kSigned[h % 3];
  }
  return unsigned_type ? static_cast<double>(h % 7) : static_cast<double>(h % 7) - 3;
}

void Store(DataType dtype, void* base, size_t index, double value) {
  char* at = static_cast<char*>(base) + index * coll::ElementSize(dtype);
  auto put = [at](auto typed) { std::memcpy(at, &typed, sizeof(typed)); };
  switch (dtype) {
    case DataType::kFloat32:
      return put(static_cast<float>(value));
    case DataType::kFloat64:
      return put(value);
    case DataType::kFloat16:
      return put(coll::FloatToHalf(static_cast<float>(value)));
    case DataType::kBFloat16:
      return put(coll::FloatToBFloat16(static_cast<float>(value)));
    case DataType::kInt32:
      return put(static_cast<int32_t>(value));
    case DataType::kInt64:
      return put(static_cast<int64_t>(value));
    case DataType::kUInt8:
      return put(static_cast<uint8_t>(static_cast<int64_t>(value) & 0xff));
  }
}

double Load(DataType dtype, const void* base, size_t index) {
  const char* at = static_cast<const char*>(base) + index * coll::ElementSize(dtype);
  auto get = [at](auto typed) {
    std::memcpy(&typed, at, sizeof(typed));
    return typed;
  };
  switch (dtype) {
    case DataType::kFloat32:
      return get(float{});
    case DataType::kFloat64:
      return get(double{});
    case DataType::kFloat16:
      return coll::HalfToFloat(get(uint16_t{}));
    case DataType::kBFloat16:
      return coll::BFloat16ToFloat(get(uint16_t{}));
    case DataType::kInt32:
      return get(int32_t{});
    case DataType::kInt64:
      return get(int64_t{});
    case DataType::kUInt8:
      return get(uint8_t{});
  }
  return 0;
}

bool IsFloat(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
         dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

// The reduction of element `index` over all members, computed in double and then brought into
// the type's range the way the type would (integers wrap; averages of integers truncate).
double Expected(uint32_t seed, int world, size_t index, DataType dtype, ReduceOp op) {
  double acc = InputValue(seed, 0, index, dtype, op);
  for (int r = 1; r < world; ++r) {
    const double v = InputValue(seed, r, index, dtype, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (dtype == DataType::kUInt8) acc = static_cast<double>(static_cast<int64_t>(acc) & 0xff);
  if (op == ReduceOp::kAvg) {
    acc = IsFloat(dtype) ? acc / world : std::trunc(acc / world);
  }
  return acc;
}

bool Close(DataType dtype, double got, double want) {
  const double tolerance = dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ? 1e-2
                           : dtype == DataType::kFloat32                               ? 1e-6
                                                                                       : 1e-12;
  return std::abs(got - want) <= tolerance * std::max(1.0, std::abs(want));
}

std::string Describe(const char* op, DataType dtype, ReduceOp reduce, size_t count) {
  return absl::StrCat(op, " ", coll::DataTypeName(dtype), " ", coll::ReduceOpName(reduce),
                      " count=", count);
}

// Runs every operation on every type for each count; returns "" or the first wrong result.
std::string CheckAll(const std::string& group, const std::vector<int64_t>& counts, uint32_t seed) {
  const int rank = coll::GetRank(group), world = coll::GetWorldSize(group);
  std::vector<char> buffer, out;
  for (size_t count : counts) {
    for (DataType dtype : kAllTypes) {
      const size_t unit = coll::ElementSize(dtype);
      auto mismatch = [&](const std::string& what, size_t i, double got, double want) {
        return absl::StrCat("rank ", rank, ": ", what, ": element ", i, " is ", got, ", expected ",
                            want);
      };
      for (ReduceOp op : kAllOps) {
        // AllReduce.
        buffer.assign(count * unit, 0);
        for (size_t i = 0; i < count; ++i)
          Store(dtype, buffer.data(), i, InputValue(seed, rank, i, dtype, op));
        coll::AllReduce(buffer.data(), count, dtype, op, group);
        for (size_t i = 0; i < count; ++i) {
          const double want = Expected(seed, world, i, dtype, op);
          if (!Close(dtype, Load(dtype, buffer.data(), i), want)) {
            return mismatch(Describe("allreduce", dtype, op, count), i,
                            Load(dtype, buffer.data(), i), want);
          }
        }
        // ReduceScatter: `count` elements per member; element i of block b is input index
        // b * count + i.
        buffer.assign(count * world * unit, 0);
        for (size_t i = 0; i < count * world; ++i)
          Store(dtype, buffer.data(), i, InputValue(seed, rank, i, dtype, op));
        out.assign(count * unit, 0);
        coll::ReduceScatter(buffer.data(), out.data(), count, dtype, op, group);
        for (size_t i = 0; i < count; ++i) {
          const double want = Expected(seed, world, rank * count + i, dtype, op);
          if (!Close(dtype, Load(dtype, out.data(), i), want)) {
            return mismatch(Describe("reduce_scatter", dtype, op, count), i,
                            Load(dtype, out.data(), i), want);
          }
        }
        // Reduce to a root that moves with the seed; others keep their input.
        const int root = (seed + static_cast<int>(op)) % world;
        buffer.assign(count * unit, 0);
        for (size_t i = 0; i < count; ++i)
          Store(dtype, buffer.data(), i, InputValue(seed, rank, i, dtype, op));
        coll::Reduce(buffer.data(), count, dtype, op, root, group);
        for (size_t i = 0; i < count; ++i) {
          const double got = Load(dtype, buffer.data(), i);
          if (rank == root) {
            const double want = Expected(seed, world, i, dtype, op);
            if (!Close(dtype, got, want))
              return mismatch(Describe("reduce", dtype, op, count), i, got, want);
          } else if (got != InputValue(seed, rank, i, dtype, op)) {
            return mismatch(Describe("reduce (a non-root's input changed)", dtype, op, count), i,
                            got, InputValue(seed, rank, i, dtype, op));
          }
        }
      }
      const ReduceOp none = ReduceOp::kSum;
      // AllGather: member r's block is its inputs.
      buffer.assign(count * unit, 0);
      for (size_t i = 0; i < count; ++i)
        Store(dtype, buffer.data(), i, InputValue(seed, rank, i, dtype, none));
      out.assign(count * world * unit, 0);
      coll::AllGather(buffer.data(), out.data(), count, dtype, group);
      for (int r = 0; r < world; ++r) {
        for (size_t i = 0; i < count; ++i) {
          const double want = InputValue(seed, r, i, dtype, none);
          if (Load(dtype, out.data(), r * count + i) != want) {
            return mismatch(Describe("allgather", dtype, none, count), r * count + i,
                            Load(dtype, out.data(), r * count + i), want);
          }
        }
      }
      // Broadcast from a root that moves with the seed.
      const int root = seed % world;
      buffer.assign(count * unit, 0);
      if (rank == root) {
        for (size_t i = 0; i < count; ++i)
          Store(dtype, buffer.data(), i, InputValue(seed, root, i, dtype, none));
      }
      coll::Broadcast(buffer.data(), count, dtype, root, group);
      for (size_t i = 0; i < count; ++i) {
        const double want = InputValue(seed, root, i, dtype, none);
        if (Load(dtype, buffer.data(), i) != want) {
          return mismatch(Describe("broadcast", dtype, none, count), i,
                          Load(dtype, buffer.data(), i), want);
        }
      }
      // Send/Recv around the ring: rank 0 sends first, the others receive first.
      std::vector<char> mine(count * unit), theirs(count * unit);
      for (size_t i = 0; i < count; ++i)
        Store(dtype, mine.data(), i, InputValue(seed, rank, i, dtype, none));
      if (world > 1) {
        const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
        if (rank == 0) {
          coll::Send(mine.data(), count, dtype, next, group);
          coll::Recv(theirs.data(), count, dtype, prev, group);
        } else {
          coll::Recv(theirs.data(), count, dtype, prev, group);
          coll::Send(mine.data(), count, dtype, next, group);
        }
        for (size_t i = 0; i < count; ++i) {
          const double want = InputValue(seed, prev, i, dtype, none);
          if (Load(dtype, theirs.data(), i) != want) {
            return mismatch(Describe("recv", dtype, none, count), i, Load(dtype, theirs.data(), i),
                            want);
          }
        }
      }
      coll::Barrier(group);
    }
  }
  return "";
}

// --- The member actor ---------------------------------------------------------------------------

std::string ErrorText(const coll::CollectiveError& e) {
  return absl::StrCat("error[rank=", e.rank(), ",op=", e.op(), ",group=", e.group(), "] ",
                      e.what());
}

class Member {
 public:
  static Member* Create() { return new Member(); }
  int Pid() { return static_cast<int>(getpid()); }

  // Joins after `delay_ms` (the late, out-of-order joins are what is tested); "ok" or the error.
  std::string Join(int world, int rank, std::string group, int delay_ms, bool tcp,
                   int rendezvous_ms, int timeout_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    coll::GroupOptions options;
    options.transport = tcp ? coll::Transport::kTcp : coll::Transport::kAuto;
    options.rendezvous_timeout = std::chrono::milliseconds(rendezvous_ms);
    options.timeout = std::chrono::milliseconds(timeout_ms);
    try {
      coll::InitGroup(world, rank, coll::Backend::kCpu, group, options);
      return "ok";
    } catch (const coll::CollectiveError& e) {
      return ErrorText(e);
    }
  }

  std::string Check(std::string group, std::vector<int64_t> counts, int seed) {
    try {
      return CheckAll(group, counts, seed);
    } catch (const coll::CollectiveError& e) {
      return ErrorText(e);
    }
  }

  // `iterations` all-reduces of `count` floats (each member's value: rank + 1); "ok <sum>" with
  // the first element, or the error with how long after the start it came.
  std::string SumLoop(std::string group, int64_t count, int iterations) {
    std::vector<float> data(count);
    const auto start = std::chrono::steady_clock::now();
    try {
      for (int i = 0; i < iterations; ++i) {
        std::fill(data.begin(), data.end(), static_cast<float>(coll::GetRank(group) + 1));
        coll::AllReduce(data, ReduceOp::kSum, group);
      }
      return absl::StrCat("ok ", data[0]);
    } catch (const coll::CollectiveError& e) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return absl::StrCat(ErrorText(e), " after_s=", seconds);
    }
  }

  // Several async all-reduces in flight, then waits for all.
  std::string AsyncSums(std::string group, int n) {
    std::vector<std::vector<int64_t>> buffers(n, std::vector<int64_t>(5000));
    std::vector<coll::Work> works;
    const int rank = coll::GetRank(group);
    for (int i = 0; i < n; ++i) {
      std::fill(buffers[i].begin(), buffers[i].end(), (rank + 1) * (i + 1));
      works.push_back(coll::AllReduceAsync(buffers[i].data(), buffers[i].size(), DataType::kInt64,
                                           ReduceOp::kSum, group));
    }
    const int world = coll::GetWorldSize(group);
    const int64_t ranks_sum = world * (world + 1) / 2;
    for (int i = 0; i < n; ++i) {
      works[i].Wait();
      if (buffers[i][4999] != ranks_sum * (i + 1)) return "wrong sum in op " + std::to_string(i);
    }
    return "ok";
  }

  std::string AllReduceCount(std::string group, int64_t count) {
    std::vector<float> data(count, 1.0f);
    try {
      coll::AllReduce(data, ReduceOp::kSum, group);
      return "ok";
    } catch (const coll::CollectiveError& e) {
      return ErrorText(e);
    }
  }

  bool Destroy(std::string group) {
    coll::DestroyGroup(group);
    return !coll::IsGroupInitialized(group);
  }

  // With `refresh`, first moves to the newest generation of declared group `group`
  // (internal::RefreshGroup); then all-reduces rank + 1 once. "gen <g> sum <s>", "excluded: ..."
  // for an ExcludedError, or the error.
  std::string GenerationSum(std::string group, bool refresh) {
    try {
      if (refresh) coll::internal::RefreshGroup(group);
      std::vector<float> data(1000, static_cast<float>(coll::GetRank(group) + 1));
      coll::AllReduce(data, ReduceOp::kSum, group);
      return absl::StrCat("gen ", coll::GetGeneration(group), " sum ", data[0]);
    } catch (const coll::ExcludedError& e) {
      return absl::StrCat("excluded(gen ", e.generation(), "): ", ErrorText(e));
    } catch (const coll::CollectiveError& e) {
      return ErrorText(e);
    }
  }
};

TROUPE_REMOTE(Member::Create, &Member::Pid, &Member::Join, &Member::Check, &Member::SumLoop,
              &Member::AsyncSums, &Member::AllReduceCount, &Member::Destroy,
              &Member::GenerationSum);

using troupe::testing::TestCluster;
using Members = std::vector<troupe::ActorHandle<Member>>;

using troupe::testing::Driver;

Members StartMembers(int n) {
  Members members;
  for (int i = 0; i < n; ++i) {
    members.push_back(
        troupe::Actor(Member::Create).SetSchedulingStrategy(troupe::Spread{}).Remote());
  }
  return members;
}

// Every member joins `group` (ranks in order of `members`), in a random order with random delays
// (from the test's seeded generator: TROUPE_TEST_SEED replays them). Fails fatally if one cannot
// join: call it inside ASSERT_NO_FATAL_FAILURE so the test stops too.
void JoinAll(const Members& members, const std::string& group, bool tcp = false,
             int timeout_ms = 60000) {
  std::mt19937& random = troupe::testing::TestRandom();
  std::vector<int> order(members.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), random);
  std::vector<troupe::ObjectRef<std::string>> joined(members.size());
  for (int rank : order) {
    const int delay = random() % 400;
    joined[rank] =
        members[rank]
            .Task(&Member::Join)
            .Remote(static_cast<int>(members.size()), rank, group, delay, tcp, 30000, timeout_ms);
  }
  for (size_t rank = 0; rank < members.size(); ++rank) {
    ASSERT_EQ(*troupe::Get(joined[rank]), "ok") << "rank " << rank;
  }
}

void CheckAllMembers(const Members& members, const std::string& group,
                     const std::vector<int64_t>& counts, int seed) {
  std::vector<troupe::ObjectRef<std::string>> results;
  for (const auto& member : members) {
    results.push_back(member.Task(&Member::Check).Remote(group, counts, seed));
  }
  for (size_t rank = 0; rank < members.size(); ++rank) {
    EXPECT_EQ(*troupe::Get(results[rank]), "") << "rank " << rank;
  }
}

// Shared-memory inbox files (/dev/shm/troupe-coll-<pid>-<nonce>) of the given processes. Other
// tests running at the same time have their own, which must not count.
int CountShmInboxesOf(const std::vector<int>& pids) {
  int found = 0;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* entry = readdir(dir)) {
      for (int pid : pids) {
        found += absl::StartsWith(entry->d_name, absl::StrCat("troupe-coll-", pid, "-"));
      }
    }
    closedir(dir);
  }
  return found;
}

int CountCollectiveKeys(TestCluster& cluster) {
  int found = 0;
  for (int job = 1; job <= 16; ++job) {
    auto keys = cluster.gcs().KVKeys("job-" + absl::StrCat(absl::Hex(job, absl::kZeroPad8)), "");
    if (keys.ok()) found += keys->size();
  }
  return found;
}

TEST(CollectivesTest, EveryOpEveryTypeOnTwoRayletsUpTo64MB) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  {
    Driver driver(cluster);
    Members members = StartMembers(2);
    ASSERT_NO_FATAL_FAILURE(JoinAll(members, "g2"));
    // Once InitGroup returned everywhere, every member has unlinked its inbox file.
    std::vector<int> pids;
    for (const auto& m : members) pids.push_back(*troupe::Get(m.Task(&Member::Pid).Remote()));
    EXPECT_EQ(CountShmInboxesOf(pids), 0) << "shared-memory inboxes left in /dev/shm";
    CheckAllMembers(members, "g2", {1, 2, 3, 7, 1000, 4099, 16411, 100003}, 1);
    // 64 MB: all-reduce and the ring paths once more at the largest size.
    std::vector<troupe::ObjectRef<std::string>> big;
    for (const auto& m : members)
      big.push_back(m.Task(&Member::SumLoop).Remote(std::string("g2"), int64_t{16 << 20}, 2));
    for (auto& result : big) EXPECT_EQ(*troupe::Get(result), "ok 3");
  }
}

TEST(CollectivesTest, FourToEightMembersOnThreeRaylets) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  Driver driver(cluster);
  Members members = StartMembers(8);
  Members four(members.begin(), members.begin() + 4);
  ASSERT_NO_FATAL_FAILURE(JoinAll(four, "g4"));
  CheckAllMembers(four, "g4", {1, 5, 1031, 40009, 300007}, 2);
  ASSERT_NO_FATAL_FAILURE(JoinAll(members, "g8"));
  CheckAllMembers(members, "g8", {1, 3, 9, 2053, 70001}, 3);
  // Async operations queue in order and overlap with the caller.
  std::vector<troupe::ObjectRef<std::string>> results;
  for (const auto& m : members)
    results.push_back(m.Task(&Member::AsyncSums).Remote(std::string("g8"), 6));
  for (auto& result : results) EXPECT_EQ(*troupe::Get(result), "ok");
}

TEST(CollectivesTest, TcpTransportBetweenMembers) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  Driver driver(cluster);
  Members members = StartMembers(3);
  ASSERT_NO_FATAL_FAILURE(JoinAll(members, "tcp", /*tcp=*/true));
  CheckAllMembers(members, "tcp", {1, 6, 777, 30011, 250007}, 4);
}

TEST(CollectivesTest, KilledMemberFailsTheOthersWithinTheTimeoutAndTheGroupCanBeRecreated) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  Driver driver(cluster);
  Members members = StartMembers(4);
  const int timeout_ms = 20000;
  ASSERT_NO_FATAL_FAILURE(JoinAll(members, "doomed", false, timeout_ms));
  const int victim = 2;
  const int victim_pid = *troupe::Get(members[victim].Task(&Member::Pid).Remote());
  std::vector<troupe::ObjectRef<std::string>> results;
  for (const auto& m : members) {
    results.push_back(
        m.Task(&Member::SumLoop).Remote(std::string("doomed"), int64_t{16 << 20}, 1000));
  }
  // The kill must land while the members are inside their all-reduces (1000 x 64 MB takes far
  // longer than this); nothing observable from here says "inside", so the 1.5 s is the scenario.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(victim_pid, SIGKILL), 0);
  for (int rank = 0; rank < 4; ++rank) {
    if (rank == victim) continue;
    const std::string result = *troupe::Get(results[rank]);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
    std::cout << "rank " << rank << " (" << waited << " s after the kill): " << result << "\n";
    EXPECT_TRUE(absl::StartsWith(result, "error[rank=2,op=allreduce,group=doomed]")) << result;
    EXPECT_TRUE(absl::StrContains(result, "collective group 'doomed' allreduce")) << result;
    EXPECT_TRUE(absl::StrContains(result, "rank 2")) << result;
    EXPECT_LT(waited, timeout_ms / 1000.0)
        << "rank " << rank << " failed only after " << waited << " s";
  }
  // The survivors leave the broken group; a fresh member replaces the dead one; it works again.
  for (int rank = 0; rank < 4; ++rank) {
    if (rank == victim) continue;
    EXPECT_TRUE(*troupe::Get(members[rank].Task(&Member::Destroy).Remote(std::string("doomed"))));
  }
  members[victim] = troupe::Actor(Member::Create).Remote();
  ASSERT_NO_FATAL_FAILURE(JoinAll(members, "doomed"));
  CheckAllMembers(members, "doomed", {1, 4097, 100003}, 5);
}

TEST(CollectivesTest, StoppedMemberOfAGroupWithHangDetectionIsNamedByTheOthers) {
  // Declared by the driver with hang_timeout 1 s (the declaration carries it to every member) and
  // a 60 s operation deadline: a member SIGSTOPped amid the all-reduces keeps its connections
  // open, and the others must name it for its silence, not time out.
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  Driver driver(cluster);
  Members members = StartMembers(3);
  coll::GroupOptions options;
  options.hang_timeout = std::chrono::seconds(1);
  options.timeout = std::chrono::seconds(60);
  coll::CreateGroup(members, {0, 1, 2}, coll::Backend::kCpu, "frozen", options);
  const int victim = 2;
  const int victim_pid = *troupe::Get(members[victim].Task(&Member::Pid).Remote());
  std::vector<troupe::ObjectRef<std::string>> results;
  for (const auto& m : members) {
    results.push_back(
        m.Task(&Member::SumLoop).Remote(std::string("frozen"), int64_t{1 << 20}, 1000000));
  }
  // Joined and looping by now (a million 4 MB all-reduces take far longer); stopped inside an
  // all-reduce or between two, the others wait for it in one.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_EQ(kill(victim_pid, SIGSTOP), 0);
  for (int rank = 0; rank < 3; ++rank) {
    if (rank == victim) continue;
    const std::string result = *troupe::Get(results[rank]);
    std::cout << "rank " << rank << ": " << result << "\n";
    EXPECT_TRUE(absl::StartsWith(result, "error[rank=2,op=allreduce,group=frozen]")) << result;
    EXPECT_TRUE(absl::StrContains(result, "rank 2 sent nothing for")) << result;
  }
  kill(victim_pid, SIGKILL);
}

TEST(CollectivesTest, MismatchedCallsAreReportedNotCorrupted) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  Members members = StartMembers(2);
  ASSERT_NO_FATAL_FAILURE(JoinAll(members, "mismatch"));
  auto a = members[0].Task(&Member::AllReduceCount).Remote(std::string("mismatch"), int64_t{10});
  auto b = members[1].Task(&Member::AllReduceCount).Remote(std::string("mismatch"), int64_t{12});
  for (const std::string& result : {*troupe::Get(a), *troupe::Get(b)}) {
    EXPECT_TRUE(absl::StrContains(result, "matching sizes")) << result;
  }
  // The group stays broken and says why.
  const std::string later = *troupe::Get(
      members[0].Task(&Member::AllReduceCount).Remote(std::string("mismatch"), int64_t{10}));
  EXPECT_TRUE(absl::StrContains(later, "the group is broken since allreduce #0 failed")) << later;
}

TEST(CollectivesTest, RendezvousTimeoutNamesTheMissingRank) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  Members members = StartMembers(2);
  // World of 3, but rank 2 never comes.
  auto r0 =
      members[0].Task(&Member::Join).Remote(3, 0, std::string("lonely"), 0, false, 1500, 5000);
  auto r1 =
      members[1].Task(&Member::Join).Remote(3, 1, std::string("lonely"), 0, false, 1500, 5000);
  const std::string e0 = *troupe::Get(r0), e1 = *troupe::Get(r1);
  EXPECT_TRUE(absl::StrContains(e0, "rank(s) 2 did not join")) << e0;
  EXPECT_TRUE(absl::StrContains(e1, "rank(s) 2 did not join")) << e1;
  EXPECT_TRUE(absl::StartsWith(e0, "error[rank=2,")) << e0;
}

TEST(CollectivesTest, DriverDeclaredGroupIsJoinedAtFirstUseAndLeavesNothingBehind) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  {
    Driver driver(cluster);
    Members members = StartMembers(3);
    // Ranks need not follow the order of the handles.
    coll::CreateGroup(members, {2, 0, 1}, coll::Backend::kCpu, "declared");
    std::vector<troupe::ObjectRef<std::string>> results;
    for (const auto& m : members)
      results.push_back(
          m.Task(&Member::SumLoop).Remote(std::string("declared"), int64_t{1 << 20}, 3));
    for (auto& result : results) EXPECT_EQ(*troupe::Get(result), "ok 6");  // 1 + 2 + 3
    // Bad declarations are refused with what to fix.
    try {
      coll::CreateGroup(members, {0, 0, 1}, coll::Backend::kCpu, "bad");
      ADD_FAILURE() << "duplicate ranks accepted";
    } catch (const coll::CollectiveError& e) {
      EXPECT_TRUE(absl::StrContains(e.what(), "each exactly once")) << e.what();
    }
    coll::DestroyGroup("declared");
    EXPECT_EQ(CountCollectiveKeys(cluster), 0) << "rendezvous keys left in the KV";
  }
  // The job ended: its KV namespace is gone too.
  EXPECT_EQ(CountCollectiveKeys(cluster), 0);
}

// Issue 33: generations of an elastic declared group. The driver declares the group again
// without a member (as after it was reported failed); the others move to the new generation and
// sum without it; the excluded member, coming back with its old generation, cannot reach them and
// its operations fail with ExcludedError (fencing), never mixing into the new generation.
TEST(CollectivesTest, ElasticGenerationsFenceAnExcludedMember) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  Driver driver(cluster);
  Members members = StartMembers(3);
  std::vector<std::string> ids;
  for (const auto& m : members) ids.push_back(m.binary_id());
  const std::string group = "elastic";
  EXPECT_EQ(coll::internal::DeclareGroup(ids, {0, 1, 2}, coll::Backend::kCpu, group, {}, 0, true),
            1);
  std::vector<troupe::ObjectRef<std::string>> sums;
  for (const auto& m : members) sums.push_back(m.Task(&Member::GenerationSum).Remote(group, true));
  for (auto& sum : sums) EXPECT_EQ(*troupe::Get(sum), "gen 1 sum 6");  // 1 + 2 + 3

  // Generation 2 leaves member 2 out; the others move at their refresh (not on their own).
  EXPECT_EQ(coll::internal::DeclaredGeneration(group), 1);
  EXPECT_EQ(coll::internal::DeclareGroup({ids[0], ids[1]}, {0, 1}, coll::Backend::kCpu, group, {},
                                         0, true),
            2);
  EXPECT_EQ(coll::internal::DeclaredGeneration(group), 2);
  auto a = members[0].Task(&Member::GenerationSum).Remote(group, true);
  auto b = members[1].Task(&Member::GenerationSum).Remote(group, true);
  EXPECT_EQ(*troupe::Get(a), "gen 2 sum 3");  // 1 + 2: nothing of member 2's
  EXPECT_EQ(*troupe::Get(b), "gen 2 sum 3");

  // Member 2 resumes with generation 1: its peers there are gone, and it is told why.
  const std::string stale =
      *troupe::Get(members[2].Task(&Member::GenerationSum).Remote(group, false));
  EXPECT_TRUE(absl::StartsWith(stale, "excluded(gen 2): error[rank=-1,op=allreduce,group=elastic]"))
      << stale;
  EXPECT_TRUE(absl::StrContains(stale, "this member was excluded: generation 2")) << stale;
  const std::string refreshed =
      *troupe::Get(members[2].Task(&Member::GenerationSum).Remote(group, true));
  EXPECT_TRUE(absl::StartsWith(refreshed, "excluded(gen 2): ")) << refreshed;
  // The new generation is unharmed.
  a = members[0].Task(&Member::GenerationSum).Remote(group, false);
  b = members[1].Task(&Member::GenerationSum).Remote(group, false);
  EXPECT_EQ(*troupe::Get(a), "gen 2 sum 3");
  EXPECT_EQ(*troupe::Get(b), "gen 2 sum 3");

  // Generations only grow.
  try {
    coll::internal::DeclareGroup({ids[0]}, {0}, coll::Backend::kCpu, group, {}, 2, true);
    ADD_FAILURE() << "an old generation was declared again";
  } catch (const coll::CollectiveError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "generations only grow")) << e.what();
  }
  coll::DestroyGroup(group);
}

TEST(CollectivesTest, BadArgumentsGetClearErrors) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto expect_error = [](const std::function<void()>& call, const std::string& text) {
    try {
      call();
      ADD_FAILURE() << "no error; expected: " << text;
    } catch (const coll::CollectiveError& e) {
      EXPECT_TRUE(absl::StrContains(e.what(), text)) << e.what();
      EXPECT_EQ(e.rank(), -1);
    }
  };
  expect_error([] { coll::InitGroup(2, 5, coll::Backend::kCpu, "x"); }, "rank 5 is outside [0, 2)");
  expect_error([] { coll::InitGroup(0, 0, coll::Backend::kCpu, "x"); },
               "world size 0 must be >= 1");
  expect_error([] { coll::InitGroup(1, 0, coll::Backend::kCpu, "a/b"); }, "without '/'");
  expect_error(
      [] {
        coll::GroupOptions options;
        options.hang_timeout = std::chrono::milliseconds(50);
        coll::InitGroup(1, 0, coll::Backend::kCpu, "x", options);
      },
      "hang_timeout is 50 ms; use 0 (off) or at least 200 ms");
  expect_error([] { coll::Barrier("nobody"); }, "this process is not a member");
  // A world of one works without peers, and rejects a second init under the same name.
  coll::InitGroup(1, 0, coll::Backend::kCpu, "solo");
  std::vector<int32_t> v = {1, 2, 3};
  coll::AllReduce(v, ReduceOp::kSum, "solo");
  EXPECT_EQ(v, (std::vector<int32_t>{1, 2, 3}));
  expect_error([] { coll::InitGroup(1, 0, coll::Backend::kCpu, "solo"); }, "already initialized");
  expect_error([&] { coll::Broadcast(v, 3, "solo"); }, "root 3 is outside [0, 1)");
  expect_error([&] { coll::Send(v, 0, "solo"); }, "cannot send to itself");
  std::vector<int32_t> odd = {1, 2, 3};
  coll::DestroyGroup("solo");
  coll::InitGroup(2 - 1, 0, coll::Backend::kCpu, "solo");  // re-created after DestroyGroup
  EXPECT_EQ(coll::ReduceScatter(odd, ReduceOp::kMax, "solo"), odd);
  coll::DestroyGroup("solo");
}

}  // namespace

int main(int argc, char** argv) {
  // Started by a raylet as a worker: run actors, never return.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
