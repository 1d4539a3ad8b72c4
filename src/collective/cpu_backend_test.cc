// The CPU backend's pipelined ring between real processes (forked members meeting through a
// file-backed KV), over TCP and over shared memory:
//  - all-reduce, reduce-scatter, all-gather, reduce and broadcast just past the one-step size, at
//    sizes that do not divide by the member count, for 1-, 2-, 4- and 8-byte elements, with kAvg
//    (averaged while it is forwarded) — every member's result against a reference;
//  - a member that dies in the middle of the all-gather half of a pipelined all-reduce makes the
//    others fail naming it, instead of hanging until their timeout;
//  - hang detection (MeshOptions::hang_timeout): a member stopped (SIGSTOP) mid-all-reduce is
//    named by every other member, a member busy between operations is not, and with detection
//    off a stopped member is left to the operation's deadline.
#include "src/collective/cpu_backend.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/collective/file_kv_testing.h"
#include "src/collective/reduce.h"

namespace troupe::collective {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

OpContext Context(OpCode op, uint32_t seq) {
  return {op, seq, absl::Now() + kTimeout, kTimeout};
}

struct GroupSpec {
  int world = 3;
  bool force_tcp = false;
  absl::Duration hang_timeout = absl::ZeroDuration();
  // Members that stop themselves (SIGSTOP) and so never write a result. The others then stay,
  // failed or not, until all of them have theirs (leaving closes connections, which a member
  // still deciding could take for the cause); the stopped ones are SIGKILLed at the end.
  std::vector<int> stopped;
};

// Runs `body(backend, rank)` in one forked process per member and returns each one's result
// ("OK ..." or "ERR <cause rank> <message>"; "killed" if it exited without one).
std::vector<std::string> RunGroup(
    const GroupSpec& spec, const std::function<std::string(CpuBackend& backend, int rank)>& body) {
  char dir_template[] = "/tmp/cpu_backend_test.XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const int world = spec.world;
  auto is_stopped = [&spec](int rank) {
    return std::find(spec.stopped.begin(), spec.stopped.end(), rank) != spec.stopped.end();
  };
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      MeshOptions options;
      options.group = "g";
      options.world_size = world;
      options.rank = rank;
      options.key_prefix = "collective/g/";
      options.listen_ip = "127.0.0.1";
      options.force_tcp = spec.force_tcp;
      options.rendezvous_timeout = kTimeout;
      options.hang_timeout = spec.hang_timeout;
      auto mesh = Mesh::Connect(options, FileKv(dir));
      std::string result;
      // Lives until this member leaves (below), not just until its operations returned.
      std::unique_ptr<CpuBackend> backend;
      if (!mesh.ok()) {
        result = absl::StrCat("ERR ", PeerOf(mesh.status()), " ", mesh.status().message());
      } else {
        backend = std::make_unique<CpuBackend>(std::move(*mesh));
        result = body(*backend, rank);
      }
      WriteTestFile(absl::StrCat(dir, "/result.", rank), result);
      // Leaving (destroying the backend, or exiting) closes this member's connections, which
      // peers still finishing the same operation take for a death (DestroyGroup's documented
      // semantics): wait until all have a result (a failed member does not: the group is broken
      // already, and a dead peer never writes one).
      const bool stay = absl::StartsWith(result, "OK") || !spec.stopped.empty();
      const absl::Time until = absl::Now() + (stay ? absl::Seconds(60) : absl::ZeroDuration());
      for (int peer = 0; peer < world && absl::Now() < until; ++peer) {
        if (is_stopped(peer)) continue;
        while (access(absl::StrCat(dir, "/result.", peer).c_str(), F_OK) != 0 &&
               absl::Now() < until) {
          absl::SleepFor(absl::Milliseconds(5));
        }
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(150);  // a hung member fails the test
  for (int rank = 0; rank < world; ++rank) {
    if (is_stopped(rank)) continue;
    const pid_t pid = pids[rank];
    int status;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  for (int rank : spec.stopped) {  // the others are done
    int status;
    kill(pids[rank], SIGKILL);
    waitpid(pids[rank], &status, 0);
  }
  std::vector<std::string> results;
  for (int rank = 0; rank < world; ++rank) {
    const std::string path = absl::StrCat(dir, "/result.", rank);
    results.push_back(access(path.c_str(), F_OK) == 0 ? ReadTestFile(path) : "killed");
  }
  std::system(("rm -rf " + dir).c_str());
  return results;
}

std::vector<std::string> RunGroup(
    int world, bool force_tcp,
    const std::function<std::string(CpuBackend& backend, int rank)>& body) {
  return RunGroup(GroupSpec{.world = world, .force_tcp = force_tcp}, body);
}

std::string Err(const absl::Status& status) {
  return absl::StrCat("ERR ", PeerOf(status), " ", status.message());
}

// "ERR <cause rank> <code> <message>".
std::string ErrWithCode(const absl::Status& status) {
  return absl::StrCat("ERR ", PeerOf(status), " ", absl::StatusCodeToString(status.code()), " ",
                      status.message());
}

// Small integers, exact in every type (sums of up to 8 members stay exact in f16/u8).
std::vector<char> Input(DataType dtype, size_t count, int rank) {
  std::vector<char> out(count * ElementSize(dtype));
  for (size_t i = 0; i < count; ++i) {
    const int value = 1 + (rank * 3 + static_cast<int>(i % 11)) % 7;
    char* at = out.data() + i * ElementSize(dtype);
    switch (dtype) {
      case DataType::kFloat32: *reinterpret_cast<float*>(at) = value; break;
      case DataType::kFloat64: *reinterpret_cast<double*>(at) = value; break;
      case DataType::kFloat16:
        *reinterpret_cast<uint16_t*>(at) = FloatToHalf(static_cast<float>(value));
        break;
      case DataType::kBFloat16:
        *reinterpret_cast<uint16_t*>(at) = FloatToBFloat16(static_cast<float>(value));
        break;
      case DataType::kInt32: *reinterpret_cast<int32_t*>(at) = value; break;
      case DataType::kInt64: *reinterpret_cast<int64_t*>(at) = value; break;
      case DataType::kUInt8: *reinterpret_cast<uint8_t*>(at) = value; break;
    }
  }
  return out;
}

std::vector<char> Reference(DataType dtype, ReduceOp op, size_t count, int world) {
  std::vector<char> out = Input(dtype, count, 0);
  for (int rank = 1; rank < world; ++rank) {
    ReduceInto(dtype, op, out.data(), Input(dtype, count, rank).data(), count);
  }
  if (op == ReduceOp::kAvg) FinishAverage(dtype, out.data(), count, world);
  return out;
}

// Where `got` and `want` first differ ("" if equal).
std::string FirstDifference(const std::vector<char>& got, const char* want, size_t bytes,
                            const std::string& what) {
  for (size_t i = 0; i < bytes; ++i) {
    if (got[i] != want[i]) return absl::StrCat("ERR -1 ", what, ": byte ", i, " of ", bytes);
  }
  return "";
}

struct Case {
  DataType dtype;
  ReduceOp op;
  size_t count;
};

// Past the one-step size, not divisible by 3 or 4 members, per element size.
std::vector<Case> Cases() {
  const size_t small = CpuBackend::kSmallBytes;
  return {{DataType::kFloat32, ReduceOp::kSum, small / 4 + 1},
          {DataType::kFloat32, ReduceOp::kAvg, (1 << 20) + 7},
          {DataType::kFloat16, ReduceOp::kSum, small / 2 + 5},
          {DataType::kBFloat16, ReduceOp::kMax, (3 << 18) + 1},
          {DataType::kUInt8, ReduceOp::kSum, 3 * small + 2},
          {DataType::kInt32, ReduceOp::kMin, (1 << 19) + 3},
          {DataType::kInt64, ReduceOp::kAvg, small / 8 + 13},
          {DataType::kFloat64, ReduceOp::kProduct, (1 << 17) + 9}};
}

// Every case through every ring operation on one member; "OK" or the first wrong result.
std::string RunCases(CpuBackend& backend, int rank, int world) {
  uint32_t seq = 0;
  for (const Case& c : Cases()) {
    const size_t unit = ElementSize(c.dtype), bytes = c.count * unit;
    const std::string name = absl::StrCat(DataTypeName(c.dtype), " ", ReduceOpName(c.op), " x",
                                          c.count);
    const std::vector<char> want = Reference(c.dtype, c.op, c.count, world);
    std::vector<char> data = Input(c.dtype, c.count, rank);
    if (auto s = backend.AllReduce(data.data(), c.count, c.dtype, c.op,
                                   Context(OpCode::kAllReduce, seq++));
        !s.ok()) {
      return Err(s);
    }
    if (auto d = FirstDifference(data, want.data(), bytes, "allreduce " + name); !d.empty()) {
      return d;
    }
    // Reduce-scatter of world blocks of `count`: block r of the reference.
    std::vector<char> blocks;
    for (int r = 0; r < world; ++r) {
      std::vector<char> in = Input(c.dtype, c.count, rank);
      blocks.insert(blocks.end(), in.begin(), in.end());
    }
    std::vector<char> mine(bytes);
    if (auto s = backend.ReduceScatter(blocks.data(), mine.data(), c.count, c.dtype, c.op,
                                       Context(OpCode::kReduceScatter, seq++));
        !s.ok()) {
      return Err(s);
    }
    if (auto d = FirstDifference(mine, want.data(), bytes, "reduce_scatter " + name); !d.empty()) {
      return d;
    }
    // All-gather: block r is member r's input.
    std::vector<char> gathered(bytes * world);
    std::vector<char> own = Input(c.dtype, c.count, rank);
    if (auto s = backend.AllGather(own.data(), gathered.data(), c.count, c.dtype,
                                   Context(OpCode::kAllGather, seq++));
        !s.ok()) {
      return Err(s);
    }
    for (int r = 0; r < world; ++r) {
      std::vector<char> block(gathered.begin() + r * bytes, gathered.begin() + (r + 1) * bytes);
      if (auto d = FirstDifference(block, Input(c.dtype, c.count, r).data(), bytes,
                                   absl::StrCat("allgather block ", r, " ", name));
          !d.empty()) {
        return d;
      }
    }
    // Reduce to the last member, then broadcast its result from there.
    const int root = world - 1;
    data = Input(c.dtype, c.count, rank);
    if (auto s = backend.Reduce(data.data(), c.count, c.dtype, c.op, root,
                                Context(OpCode::kReduce, seq++));
        !s.ok()) {
      return Err(s);
    }
    if (rank == root) {
      if (auto d = FirstDifference(data, want.data(), bytes, "reduce " + name); !d.empty()) {
        return d;
      }
    } else {
      std::fill(data.begin(), data.end(), 0);
    }
    if (auto s = backend.Broadcast(data.data(), c.count, c.dtype, root,
                                   Context(OpCode::kBroadcast, seq++));
        !s.ok()) {
      return Err(s);
    }
    if (auto d = FirstDifference(data, want.data(), bytes, "broadcast " + name); !d.empty()) {
      return d;
    }
  }
  return "OK";
}

void ExpectAllOk(const std::vector<std::string>& results) {
  for (size_t rank = 0; rank < results.size(); ++rank) {
    EXPECT_EQ(results[rank], "OK") << "rank " << rank;
  }
}

TEST(CpuBackendTest, RingOperationsAtOddSizesOverTcp) {
  for (int world : {2, 3}) {
    ExpectAllOk(RunGroup(world, /*force_tcp=*/true, [world](CpuBackend& backend, int rank) {
      return RunCases(backend, rank, world);
    }));
  }
}

TEST(CpuBackendTest, RingOperationsAtOddSizesOverSharedMemory) {
  ExpectAllOk(RunGroup(4, /*force_tcp=*/false, [](CpuBackend& backend, int rank) {
    return RunCases(backend, rank, 4);
  }));
}

// Rank 2 dies in the middle of the all-gather half of a 24 MB all-reduce: a page in the middle
// of its chunk 2 is read-only, and chunk 2 is only read before the all-gather's first step
// writes the final sums into it. Writing there kills it (shared memory: SIGSEGV) or fails its
// receive (TCP: EFAULT, after which it exits without a word, as a crash would). The others must
// fail naming it, instead of hanging until their timeout.
TEST(CpuBackendTest, MemberDyingMidPipelineFailsTheOthersNamingIt) {
  constexpr int kWorld = 3, kVictim = 2;
  constexpr size_t kCount = 6 << 20;
  for (bool force_tcp : {true, false}) {
    std::vector<std::string> results =
        RunGroup(kWorld, force_tcp, [](CpuBackend& backend, int rank) -> std::string {
          const size_t bytes = kCount * sizeof(float);
          void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
          float* data = static_cast<float*>(mapped);
          std::fill(data, data + kCount, 1.0f);
          if (rank == kVictim) {
            const size_t middle = (kCount / kWorld * rank + kCount / kWorld / 2) * sizeof(float);
            mprotect(static_cast<char*>(mapped) + middle / 4096 * 4096, 4096, PROT_READ);
          }
          absl::Status status = backend.AllReduce(data, kCount, DataType::kFloat32,
                                                  ReduceOp::kSum, Context(OpCode::kAllReduce, 0));
          if (rank == kVictim) _exit(0);
          if (status.ok()) return "OK";
          backend.Abort(status);  // as the Group does: peers hear why before the close
          return Err(status);
        });
    SCOPED_TRACE(force_tcp ? "tcp" : "shared memory");
    EXPECT_EQ(results[kVictim], "killed");
    for (int rank : {0, 1}) {
      // Named as the cause, by its closed connection (not a timeout: that would say "timed out").
      EXPECT_TRUE(absl::StartsWith(results[rank], "ERR 2 ")) << results[rank];
      EXPECT_FALSE(absl::StrContains(results[rank], "timed out")) << results[rank];
    }
  }
}

// A 24 MB all-reduce in which rank `victim` stops (SIGSTOP, as a frozen process or host would)
// mid-operation, its sockets left open: the read-only page of the test above, but the fault it
// causes (shared memory: SIGSEGV) or the receive it fails (TCP: EFAULT) stops it instead of
// ending it. It never returns; the others return their all-reduce's outcome ("ERR <cause rank>
// <code> <message>"), without aborting (each must name the victim on its own).
std::string AllReduceWithVictimStopping(CpuBackend& backend, int rank, int victim,
                                        absl::Duration timeout) {
  constexpr size_t kCount = 6 << 20;
  const size_t bytes = kCount * sizeof(float);
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  float* data = static_cast<float*>(mapped);
  std::fill(data, data + kCount, 1.0f);
  const int world = 3;
  if (rank == victim) {
    signal(SIGSEGV, [](int) { raise(SIGSTOP); });
    const size_t middle = (kCount / world * rank + kCount / world / 2) * sizeof(float);
    mprotect(static_cast<char*>(mapped) + middle / 4096 * 4096, 4096, PROT_READ);
  }
  absl::Status status =
      backend.AllReduce(data, kCount, DataType::kFloat32, ReduceOp::kSum,
                        OpContext{OpCode::kAllReduce, 0, absl::Now() + timeout, timeout});
  if (rank == victim) {
    raise(SIGSTOP);
    _exit(1);  // not reached: the test kills it
  }
  return status.ok() ? "OK" : ErrWithCode(status);
}

TEST(CpuBackendTest, MemberStoppedMidAllReduceIsNamedByEveryOtherMemberAsHung) {
  // hang_timeout 1 s; the operation's deadline (30 s) would say "timed out", not "sent nothing".
  constexpr int kVictim = 2;
  for (bool force_tcp : {true, false}) {
    SCOPED_TRACE(force_tcp ? "tcp" : "shared memory");
    std::vector<std::string> results =
        RunGroup({.world = 3,
                  .force_tcp = force_tcp,
                  .hang_timeout = absl::Seconds(1),
                  .stopped = {kVictim}},
                 [](CpuBackend& backend, int rank) {
                   return AllReduceWithVictimStopping(backend, rank, kVictim, absl::Seconds(30));
                 });
    EXPECT_EQ(results[kVictim], "killed");
    for (int rank : {0, 1}) {
      EXPECT_TRUE(
          absl::StartsWith(results[rank], "ERR 2 DEADLINE_EXCEEDED rank 2 sent nothing for"))
          << results[rank];
    }
  }
}

TEST(CpuBackendTest, MemberStoppedWithHangDetectionOffIsLeftToTheDeadline) {
  // hang_timeout 0 (the default): no heartbeats, nobody is taken for hung; the 2 s deadline of
  // the operation ends the wait.
  constexpr int kVictim = 2;
  std::vector<std::string> results = RunGroup(
      {.world = 3, .force_tcp = true, .stopped = {kVictim}}, [](CpuBackend& backend, int rank) {
        return AllReduceWithVictimStopping(backend, rank, kVictim, absl::Seconds(2));
      });
  for (int rank : {0, 1}) {
    EXPECT_TRUE(absl::StartsWith(results[rank], "ERR ")) << results[rank];
    EXPECT_TRUE(absl::StrContains(results[rank], "DEADLINE_EXCEEDED timed out after 2s"))
        << results[rank];
    EXPECT_FALSE(absl::StrContains(results[rank], "sent nothing")) << results[rank];
  }
}

TEST(CpuBackendTest, MemberBusyBetweenOperationsIsNotTakenForHung) {
  // hang_timeout 1 s. Rank 1 computes (sleeps) 3 s between operations 0 and 1: ranks 0 and 2
  // wait for it in operation 1 all that time, hearing only its heartbeats. Then ranks 0 and 2
  // are late for operation 2, so rank 1 waits there, after 3 s of reading nothing: what it did
  // not read meanwhile must not count against them.
  std::vector<std::string> results = RunGroup(
      {.world = 3, .hang_timeout = absl::Seconds(1)},
      [](CpuBackend& backend, int rank) -> std::string {
        for (uint32_t seq = 0; seq < 3; ++seq) {
          if (seq == 1 && rank == 1) absl::SleepFor(absl::Seconds(3));
          if (seq == 2 && rank != 1) absl::SleepFor(absl::Milliseconds(300));
          std::vector<float> data(1024, static_cast<float>(rank + 1));
          absl::Status status = backend.AllReduce(data.data(), data.size(), DataType::kFloat32,
                                                  ReduceOp::kSum, Context(OpCode::kAllReduce, seq));
          if (!status.ok()) return ErrWithCode(status);
          if (data[0] != 6 || data.back() != 6) {
            return absl::StrCat("ERR -1 allreduce #", seq, " gave ", data[0]);
          }
        }
        return "OK";
      });
  ExpectAllOk(results);
}

}  // namespace
}  // namespace troupe::collective
