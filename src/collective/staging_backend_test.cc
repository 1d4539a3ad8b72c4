// StagingBackend: device buffers on a CPU group, with FakeDeviceMemory as the device.
//  - Every operation between forked members (real CpuBackends over shared memory and TCP), with
//    device buffers, at sizes on and around chunk boundaries and odd sizes, chunks on the
//    one-step and the ring algorithms, against a reference; members mixing host and device
//    buffers; nothing copied between the wrong kinds of memory.
//  - The pipeline's order, from the fake's event log: the device-to-host copy of chunk k + 1 and
//    the host-to-device copy of chunk k - 1 complete while the collective works on chunk k.
//  - The caller's stream: work queued on it before the call is in the data that is reduced, and
//    the caller's later work is ordered after the copies back.
//  - Host buffers take no copies at all; a failing chunk names itself and leaves no copy running.
#include "src/collective/staging_backend.h"

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
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "src/collective/cpu_backend.h"
#include "src/collective/fake_device_memory.h"
#include "src/collective/file_kv_testing.h"
#include "src/collective/reduce.h"
#include "src/collective/test_backend_testing.h"

namespace troupe::collective {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

OpContext Context(OpCode op, uint32_t seq, void* stream = nullptr) {
  OpContext ctx{op, seq, absl::Now() + kTimeout, kTimeout};
  ctx.cuda_stream = stream;
  return ctx;
}

// --- Between forked members -------------------------------------------------------------------

using Body =
    std::function<std::string(StagingBackend& backend, FakeDeviceMemory& memory, int rank)>;

// Runs `body` in one forked process per member, each with a StagingBackend (chunks of
// `chunk_bytes`) over a real CpuBackend and its own FakeDeviceMemory; returns each member's
// result ("OK", or what went wrong).
std::vector<std::string> RunGroup(int world, bool force_tcp, size_t chunk_bytes, const Body& body) {
  char dir_template[] = "/tmp/staging_backend_test.XXXXXX";
  const std::string dir = mkdtemp(dir_template);
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
      options.force_tcp = force_tcp;
      options.rendezvous_timeout = kTimeout;
      auto mesh = Mesh::Connect(options, FileKv(dir));
      std::string result;
      FakeDeviceMemory memory;
      std::unique_ptr<StagingBackend> backend;
      if (!mesh.ok()) {
        result = absl::StrCat("ERR ", mesh.status().message());
      } else {
        backend = std::make_unique<StagingBackend>(std::make_unique<CpuBackend>(std::move(*mesh)),
                                                   &memory, rank, world, chunk_bytes);
        result = body(*backend, memory, rank);
        if (auto problems = memory.problems(); !problems.empty()) {
          result = "fake device misuse: " + absl::StrJoin(problems, "; ");
        }
      }
      WriteTestFile(absl::StrCat(dir, "/result.", rank), result);
      // Stay until every member has a result: leaving closes links peers may still be using.
      const absl::Time until = absl::Now() + (result == "OK" ? kTimeout : absl::ZeroDuration());
      for (int peer = 0; peer < world && absl::Now() < until; ++peer) {
        while (access(absl::StrCat(dir, "/result.", peer).c_str(), F_OK) != 0 &&
               absl::Now() < until) {
          absl::SleepFor(absl::Milliseconds(5));
        }
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  std::vector<std::string> results;
  for (int rank = 0; rank < world; ++rank) {
    waitpid(pids[rank], nullptr, 0);
    const std::string path = absl::StrCat(dir, "/result.", rank);
    results.push_back(access(path.c_str(), F_OK) == 0 ? ReadTestFile(path) : "killed");
  }
  return results;
}

// A device buffer holding `values`.
template <typename T>
T* ToDevice(FakeDeviceMemory& memory, const std::vector<T>& values) {
  void* device = memory.AllocateDevice(values.size() * sizeof(T));
  memory.Upload(device, values.data(), values.size() * sizeof(T));
  return static_cast<T*>(device);
}

template <typename T>
std::vector<T> FromDevice(FakeDeviceMemory& memory, const T* device, size_t count) {
  std::vector<T> values(count);
  memory.Download(values.data(), device, count * sizeof(T));
  return values;
}

// Member `rank`'s input element i: small integers, so float sums are exact.
template <typename T>
T Input(int rank, size_t i) {
  return static_cast<T>((rank + 1) * 3 + static_cast<int>(i % 11));
}

template <typename T>
std::string Compare(const std::string& what, const std::vector<T>& got,
                    const std::vector<T>& want) {
  if (got.size() != want.size()) return absl::StrCat(what, ": size ", got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return absl::StrCat(what, ": element ", i, " of ", got.size(), " is ",
                          static_cast<double>(got[i]), ", want ", static_cast<double>(want[i]));
    }
  }
  return "";
}

std::string Failed(const std::string& what, const absl::Status& status) {
  return absl::StrCat(what, ": ", status.ToString());
}

// Every operation on device buffers of `count` elements of T; "" when all results are right.
// `host_rank`: this rank passes host buffers instead (members mixing memory kinds).
template <typename T>
std::string EveryOp(StagingBackend& backend, FakeDeviceMemory& memory, int rank, int world,
                    size_t count, uint32_t& seq, int host_rank = -1) {
  const DataType dtype = DataTypeOf<T>();
  const bool on_device = rank != host_rank;
  const std::string size = absl::StrCat(count, " x ", DataTypeName(dtype), ": ");
  auto input = [&](int r) {
    std::vector<T> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = Input<T>(r, i);
    return v;
  };
  std::vector<T> sum(count, 0);
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < count; ++i) sum[i] += Input<T>(r, i);
  }
  // Runs `op` on a buffer holding `values` (on the device or not) and returns what it holds then.
  auto run = [&](std::vector<T> values, const std::function<absl::Status(T*)>& op,
                 absl::Status* status) {
    if (!on_device) {
      *status = op(values.data());
      return values;
    }
    T* device = ToDevice(memory, values);
    *status = op(device);
    return FromDevice(memory, device, values.size());
  };
  absl::Status status;
  std::string error;

  // AllReduce: sum, and average.
  auto got = run(
      input(rank),
      [&](T* d) {
        return backend.AllReduce(d, count, dtype, ReduceOp::kSum,
                                 Context(OpCode::kAllReduce, seq++));
      },
      &status);
  if (!status.ok()) return Failed(size + "allreduce", status);
  if (!(error = Compare(size + "allreduce sum", got, sum)).empty()) return error;
  got = run(
      input(rank),
      [&](T* d) {
        return backend.AllReduce(d, count, dtype, ReduceOp::kAvg,
                                 Context(OpCode::kAllReduce, seq++));
      },
      &status);
  if (!status.ok()) return Failed(size + "allreduce avg", status);
  std::vector<T> avg(count);
  for (size_t i = 0; i < count; ++i) avg[i] = static_cast<T>(sum[i] / static_cast<T>(world));
  if (!(error = Compare(size + "allreduce avg", got, avg)).empty()) return error;

  // Broadcast from the last rank (the root copies in; the others copy out only).
  const int root = world - 1;
  got = run(
      input(rank),
      [&](T* d) {
        return backend.Broadcast(d, count, dtype, root, Context(OpCode::kBroadcast, seq++));
      },
      &status);
  if (!status.ok()) return Failed(size + "broadcast", status);
  if (!(error = Compare(size + "broadcast", got, input(root))).empty()) return error;

  // Reduce to rank 0: only its buffer changes.
  got = run(
      input(rank),
      [&](T* d) {
        return backend.Reduce(d, count, dtype, ReduceOp::kSum, 0, Context(OpCode::kReduce, seq++));
      },
      &status);
  if (!status.ok()) return Failed(size + "reduce", status);
  if (!(error = Compare(size + "reduce", got, rank == 0 ? sum : input(rank))).empty()) {
    return error;
  }

  // AllGather (staged whole): send and receive both on the device.
  {
    std::vector<T> want;
    for (int r = 0; r < world; ++r) {
      auto v = input(r);
      want.insert(want.end(), v.begin(), v.end());
    }
    std::vector<T> mine = input(rank);
    std::vector<T> gathered(count * world);
    if (on_device) {
      T* send = ToDevice(memory, mine);
      T* recv = ToDevice(memory, gathered);
      status = backend.AllGather(send, recv, count, dtype, Context(OpCode::kAllGather, seq++));
      gathered = FromDevice(memory, recv, count * world);
    } else {
      status = backend.AllGather(mine.data(), gathered.data(), count, dtype,
                                 Context(OpCode::kAllGather, seq++));
    }
    if (!status.ok()) return Failed(size + "allgather", status);
    if (!(error = Compare(size + "allgather", gathered, want)).empty()) return error;
  }

  // ReduceScatter (staged whole): each rank sends world blocks of `count`, keeps its block's sum.
  {
    std::vector<T> send(count * world);
    for (size_t i = 0; i < send.size(); ++i) send[i] = Input<T>(rank, i);
    std::vector<T> want(count, 0);
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < count; ++i) want[i] += Input<T>(r, rank * count + i);
    }
    std::vector<T> recv(count);
    if (on_device) {
      T* d_send = ToDevice(memory, send);
      T* d_recv = ToDevice(memory, recv);
      status = backend.ReduceScatter(d_send, d_recv, count, dtype, ReduceOp::kSum,
                                     Context(OpCode::kReduceScatter, seq++));
      recv = FromDevice(memory, d_recv, count);
    } else {
      status = backend.ReduceScatter(send.data(), recv.data(), count, dtype, ReduceOp::kSum,
                                     Context(OpCode::kReduceScatter, seq++));
    }
    if (!status.ok()) return Failed(size + "reduce_scatter", status);
    if (!(error = Compare(size + "reduce_scatter", recv, want)).empty()) return error;
  }

  // Send / Recv around the ring (staged whole), then a barrier.
  {
    const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    std::vector<T> mine = input(rank), received(count);
    absl::Status sent;
    if (rank % 2 == 0) {
      got = run(
          mine,
          [&](T* d) { return backend.Send(d, count, dtype, next, Context(OpCode::kSendRecv, 0)); },
          &sent);
      received = run(
          received,
          [&](T* d) { return backend.Recv(d, count, dtype, prev, Context(OpCode::kSendRecv, 0)); },
          &status);
    } else {
      received = run(
          received,
          [&](T* d) { return backend.Recv(d, count, dtype, prev, Context(OpCode::kSendRecv, 0)); },
          &status);
      got = run(
          mine,
          [&](T* d) { return backend.Send(d, count, dtype, next, Context(OpCode::kSendRecv, 0)); },
          &sent);
    }
    if (!sent.ok()) return Failed(size + "send", sent);
    if (!status.ok()) return Failed(size + "recv", status);
    if (!(error = Compare(size + "recv", received, input(prev))).empty()) return error;
    if (!(error = Compare(size + "send leaves its buffer", got, mine)).empty()) return error;
  }
  if (auto s = backend.Barrier(Context(OpCode::kBarrier, seq++)); !s.ok()) {
    return Failed(size + "barrier", s);
  }
  return "";
}

// Sizes on and around chunk boundaries, odd ones, and fewer elements than members.
std::vector<size_t> Sizes(size_t per_chunk) {
  return {1, 2, per_chunk - 1, per_chunk, per_chunk + 1, 2 * per_chunk, 3 * per_chunk + 7};
}

void ExpectAllOk(const std::vector<std::string>& results) {
  for (size_t rank = 0; rank < results.size(); ++rank) {
    EXPECT_EQ(results[rank], "OK") << "rank " << rank;
  }
}

// Small chunks: every chunk takes the one-step algorithms.
TEST(StagingBackendTest, EveryOpOnDeviceBuffersSmallChunksSharedMemory) {
  constexpr size_t kChunkBytes = 256;
  ExpectAllOk(RunGroup(3, false, kChunkBytes, [&](StagingBackend& b, FakeDeviceMemory& m, int r) {
    uint32_t seq = 0;
    for (size_t count : Sizes(kChunkBytes / 4)) {
      if (auto e = EveryOp<float>(b, m, r, 3, count, seq); !e.empty()) return e;
      if (auto e = EveryOp<int32_t>(b, m, r, 3, count, seq); !e.empty()) return e;
    }
    for (size_t count : Sizes(kChunkBytes)) {
      if (auto e = EveryOp<uint8_t>(b, m, r, 3, count, seq); !e.empty()) return e;
    }
    return std::string("OK");
  }));
}

// Chunks past the one-step size: each chunk runs the pipelined ring; over TCP too.
TEST(StagingBackendTest, EveryOpOnDeviceBuffersRingChunks) {
  constexpr size_t kChunkBytes = CpuBackend::kSmallBytes + 4096;
  for (bool tcp : {false, true}) {
    SCOPED_TRACE(tcp ? "tcp" : "shared memory");
    ExpectAllOk(RunGroup(3, tcp, kChunkBytes, [&](StagingBackend& b, FakeDeviceMemory& m, int r) {
      uint32_t seq = 0;
      for (size_t count : {kChunkBytes / 8 + 1, 2 * (kChunkBytes / 8) + 3}) {
        if (auto e = EveryOp<double>(b, m, r, 3, count, seq); !e.empty()) return e;
      }
      return std::string("OK");
    }));
  }
}

// Members chunk by size alone: one member on host memory works with two on device memory.
TEST(StagingBackendTest, HostAndDeviceMembersMix) {
  constexpr size_t kChunkBytes = 256;
  ExpectAllOk(RunGroup(3, false, kChunkBytes, [&](StagingBackend& b, FakeDeviceMemory& m, int r) {
    uint32_t seq = 0;
    for (size_t count : Sizes(kChunkBytes / 4)) {
      if (auto e = EveryOp<float>(b, m, r, 3, count, seq, /*host_rank=*/1); !e.empty()) return e;
    }
    return std::string("OK");
  }));
}

// --- In one process, with a scripted inner backend ----------------------------------------------

// The "collective": logs its start and end, lets the fake device run every copy started so far
// while it works (as a GPU would, concurrently), and doubles each element (a two-member sum).
// Fails at chunk `fail_at`, if set.
class ScriptedBackend : public TestBackend {
 public:
  ScriptedBackend(FakeDeviceMemory* memory, int fail_at = -1)
      : memory_(memory), fail_at_(fail_at) {}
  int calls() const { return calls_; }

  absl::Status AllReduce(void* data, size_t count, DataType, ReduceOp, const OpContext&) override {
    const int chunk = calls_++;
    memory_->Note(absl::StrCat("op start ", chunk));
    memory_->RunCopies();
    if (chunk == fail_at_) {
      return PeerError(absl::StatusCode::kUnavailable, 1, "rank 1 is gone");
    }
    float* values = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) values[i] *= 2;
    memory_->Note(absl::StrCat("op end ", chunk));
    return absl::OkStatus();
  }

 private:
  FakeDeviceMemory* memory_;
  int fail_at_;
  int calls_ = 0;
};

size_t IndexOf(const std::vector<std::string>& events, const std::string& event) {
  auto it = std::find(events.begin(), events.end(), event);
  return it == events.end() ? events.size() : it - events.begin();
}

// The ticket of the n-th copy started in `direction` ("d2h" or "h2d"), as the log shows it.
std::string NthCopy(const std::vector<std::string>& events, const std::string& direction,
                    size_t n) {
  size_t seen = 0;
  for (const std::string& event : events) {
    if (absl::StartsWith(event, "start " + direction + " ") && seen++ == n) {
      return event.substr(6 + direction.size() + 1);
    }
  }
  return "none";
}

TEST(StagingBackendTest, CopiesOverlapTheCollectiveChunkByChunk) {
  FakeDeviceMemory memory;
  auto inner = std::make_unique<ScriptedBackend>(&memory);
  ScriptedBackend* scripted = inner.get();
  constexpr size_t kChunkBytes = 64, kChunks = 5;
  StagingBackend backend(std::move(inner), &memory, 0, 2, kChunkBytes);
  const size_t count = kChunks * kChunkBytes / 4 - 3;  // the last chunk is short
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i);
  float* device = ToDevice(memory, values);

  ASSERT_TRUE(backend
                  .AllReduce(device, count, DataType::kFloat32, ReduceOp::kSum,
                             Context(OpCode::kAllReduce, 0))
                  .ok());
  ASSERT_EQ(scripted->calls(), static_cast<int>(kChunks));
  std::vector<float> got = FromDevice(memory, device, count);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], 2.0f * i) << "element " << i;
  EXPECT_TRUE(memory.problems().empty()) << absl::StrJoin(memory.problems(), "; ");

  const std::vector<std::string> events = memory.events();
  const std::string log = absl::StrJoin(events, "\n");
  for (size_t k = 0; k < kChunks; ++k) {
    const size_t start = IndexOf(events, absl::StrCat("op start ", k));
    const size_t end = IndexOf(events, absl::StrCat("op end ", k));
    ASSERT_LT(end, events.size()) << log;
    if (k + 1 < kChunks) {
      // Chunk k + 1 was on its way in while chunk k was reduced.
      const size_t in = IndexOf(events, "done d2h " + NthCopy(events, "d2h", k + 1));
      EXPECT_GT(in, start) << "chunk " << k + 1 << " in\n" << log;
      EXPECT_LT(in, end) << "chunk " << k + 1 << " in\n" << log;
    }
    if (k >= 1) {
      // Chunk k - 1 was on its way out while chunk k was reduced.
      const size_t out = IndexOf(events, "done h2d " + NthCopy(events, "h2d", k - 1));
      EXPECT_GT(out, start) << "chunk " << k - 1 << " out\n" << log;
      EXPECT_LT(out, end) << "chunk " << k - 1 << " out\n" << log;
    }
  }
  // Two pinned chunk slots, however many chunks.
  EXPECT_EQ(memory.pinned_buffers(), 2u);
  // The caller's later work waits for the last copy back.
  EXPECT_GT(IndexOf(events, absl::StrCat("caller after ", 2 * kChunks)),
            IndexOf(events, "start h2d " + NthCopy(events, "h2d", kChunks - 1)))
      << log;
}

TEST(StagingBackendTest, CopiesRunAfterTheCallersQueuedWork) {
  FakeDeviceMemory memory;
  StagingBackend backend(std::make_unique<ScriptedBackend>(&memory), &memory, 0, 2, 64);
  const size_t count = 40;
  float* device = ToDevice(memory, std::vector<float>(count, 1.0f));
  // A "kernel" queued on the caller's stream that has not run yet: it writes 5s.
  FakeStream stream;
  stream.pending.push_back([&] {
    memory.Upload(device, std::vector<float>(count, 5.0f).data(), count * sizeof(float));
  });
  ASSERT_TRUE(backend
                  .AllReduce(device, count, DataType::kFloat32, ReduceOp::kSum,
                             Context(OpCode::kAllReduce, 0, &stream))
                  .ok());
  EXPECT_EQ(FromDevice(memory, device, count), std::vector<float>(count, 10.0f));
  const auto events = memory.events();
  EXPECT_LT(IndexOf(events, "caller work"), IndexOf(events, "done d2h 0"))
      << absl::StrJoin(events, "\n");
}

TEST(StagingBackendTest, HostBuffersAreNotCopied) {
  FakeDeviceMemory memory;
  StagingBackend backend(std::make_unique<ScriptedBackend>(&memory), &memory, 0, 2, 64);
  std::vector<float> values(100, 1.0f);
  ASSERT_TRUE(backend
                  .AllReduce(values.data(), values.size(), DataType::kFloat32, ReduceOp::kSum,
                             Context(OpCode::kAllReduce, 0))
                  .ok());
  EXPECT_EQ(values, std::vector<float>(100, 2.0f));
  for (const std::string& event : memory.events()) {
    EXPECT_TRUE(absl::StartsWith(event, "op ")) << "host memory took a device step: " << event;
  }
  // Without any device memory (CPU builds): the same, chunk by chunk.
  auto inner = std::make_unique<ScriptedBackend>(&memory);
  ScriptedBackend* scripted = inner.get();
  StagingBackend host_only(std::move(inner), nullptr, 0, 2, 64);
  ASSERT_TRUE(host_only
                  .AllReduce(values.data(), values.size(), DataType::kFloat32, ReduceOp::kSum,
                             Context(OpCode::kAllReduce, 1))
                  .ok());
  EXPECT_EQ(values, std::vector<float>(100, 4.0f));
  EXPECT_EQ(scripted->calls(), 7);  // 100 floats in chunks of 16
}

TEST(StagingBackendTest, AFailingChunkIsNamedAndLeavesNoCopyRunning) {
  FakeDeviceMemory memory;
  StagingBackend backend(std::make_unique<ScriptedBackend>(&memory, /*fail_at=*/2), &memory, 0, 2,
                         64);
  const size_t count = 80;  // 5 chunks of 16
  float* device = ToDevice(memory, std::vector<float>(count, 1.0f));
  absl::Status status = backend.AllReduce(device, count, DataType::kFloat32, ReduceOp::kSum,
                                          Context(OpCode::kAllReduce, 0));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(PeerOf(status), 1);
  EXPECT_TRUE(absl::StrContains(status.message(), "chunk 3 of 5 (elements 32..48 of 80)"))
      << status.message();
  // Every copy started was finished before AllReduce returned.
  const auto events = memory.events();
  size_t started = 0, done = 0;
  for (const std::string& event : events) {
    started += absl::StartsWith(event, "start ");
    done += absl::StartsWith(event, "done ");
  }
  EXPECT_EQ(started, done) << absl::StrJoin(events, "\n");
  // Chunks 1 and 2 made it back; the rest of the buffer is untouched.
  std::vector<float> got = FromDevice(memory, device, count);
  EXPECT_EQ(got[0], 2.0f);
  EXPECT_EQ(got[31], 2.0f);
  EXPECT_EQ(got[79], 1.0f);
}

}  // namespace
}  // namespace troupe::collective
