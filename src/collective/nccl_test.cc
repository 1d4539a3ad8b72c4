// The NCCL backend on real GPUs, with the CPU backend's feature tests (cpu_backend_test.cc).
//
// NcclTest: a world of one on one GPU (the test process is the member) — every operation with
// every reduction and data type against expected values, the async API, host memory refused,
// device choice, two members on one GPU refused, and a timed-out operation: two actors share the
// GPU as two NCCL "hosts" (NCCL_HOSTID), one never calls the all-reduce, the other's times out,
// and the communicator abort must leave no NCCL kernel spinning (cudaDeviceSynchronize returns);
// the broken group then fails fast and is created again under its name.
// NcclMultiGpuTest: one actor per GPU through the local cluster — every operation, a member
// killed mid-operation, a mismatch; these need at least 2 GPUs and skip saying so.
//
// Without a GPU driver or GPU every test skips saying why; a GPU the build cannot use (a driver
// too old for its CUDA runtime) fails every test. Failures print what went wrong.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "src/collective/cuda_status.h"
#include "troupe/api.h"
#include "troupe/collective.h"

namespace {

namespace coll = troupe::collective;
using coll::DataType;
using coll::ReduceOp;

// --- GPUs and the cluster ----------------------------------------------------------------------

// The usable GPUs; skips the test when the machine has none (no driver, no device), fails it when
// it has GPUs this build cannot use.
#define GPUS_OR_SKIP(gpus)                                                           \
  int gpus = 0;                                                                      \
  do {                                                                               \
    auto count = troupe::CudaDeviceCount();                                          \
    if (!count.ok() && troupe::IsNoGpu(count.status())) {                            \
      GTEST_SKIP() << "no GPU: " << count.status().message();                        \
    }                                                                                \
    ASSERT_TRUE(count.ok()) << "this machine has a GPU setup the build cannot use: " \
                            << count.status();                                       \
    gpus = *count;                                                                   \
  } while (0)

#define NEEDS_TWO_GPUS(gpus)                                                                    \
  int gpus = 0;                                                                                 \
  do {                                                                                          \
    auto count = troupe::CudaDeviceCount();                                                     \
    if (!count.ok() && troupe::IsNoGpu(count.status())) {                                       \
      GTEST_SKIP() << "needs at least 2 GPUs, this machine has 0 (" << count.status().message() \
                   << ")";                                                                      \
    }                                                                                           \
    ASSERT_TRUE(count.ok()) << "this machine has a GPU setup the build cannot use: "            \
                            << count.status();                                                  \
    if (*count < 2) GTEST_SKIP() << "needs at least 2 GPUs, this machine has " << *count;       \
    gpus = *count;                                                                              \
  } while (0)

// One embedded cluster for the whole binary, with the machine's GPUs.
void EnsureCluster(int gpus) {
  static bool started = false;
  if (started) return;
  troupe::Config config;
  config.num_gpus = gpus;
  troupe::Init(config);
  started = true;
}

// "" when cudaDeviceSynchronize returns within `seconds`; else what happened. A helper thread
// makes the call, so a kernel that never finishes cannot hang the caller.
std::string SynchronizeWithin(int seconds) {
  auto done = std::make_shared<std::promise<cudaError_t>>();
  std::future<cudaError_t> result = done->get_future();
  std::thread([done] { done->set_value(cudaDeviceSynchronize()); }).detach();
  if (result.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    return absl::StrCat("cudaDeviceSynchronize did not return within ", seconds,
                        " s: an NCCL kernel kept spinning on the GPU after the failed operation "
                        "(the communicator was not aborted)");
  }
  cudaError_t error = result.get();
  if (error != cudaSuccess) {
    return absl::StrCat("cudaDeviceSynchronize failed: ", cudaGetErrorString(error));
  }
  return "";
}

// --- Typed values ------------------------------------------------------------------------------

size_t ElementSize(DataType t) {
  switch (t) {
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kUInt8:
      return 1;
  }
  return 1;
}

const char* TypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return "f32";
    case DataType::kFloat64:
      return "f64";
    case DataType::kFloat16:
      return "f16";
    case DataType::kBFloat16:
      return "bf16";
    case DataType::kInt32:
      return "i32";
    case DataType::kInt64:
      return "i64";
    case DataType::kUInt8:
      return "u8";
  }
  return "?";
}

const char* OpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "?";
}

bool IsFloat(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

// Half precision for the small integers and quotients these tests use (normal numbers only).
uint16_t ToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  if ((x & 0x7fffffff) == 0) return static_cast<uint16_t>(sign);
  const int exponent = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = (x & 0x7fffff) + 0x1000;  // round to nearest
  return static_cast<uint16_t>(sign | ((exponent << 10) + (mantissa >> 13)));
}
float FromHalf(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  float value = exponent == 0 ? std::ldexp(mantissa / 1024.0f, -14)
                              : std::ldexp(1.0f + mantissa / 1024.0f, exponent - 15);
  return (h & 0x8000) ? -value : value;
}
uint16_t ToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}
float FromBf16(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

void Put(DataType t, char* base, size_t i, double v) {
  char* p = base + i * ElementSize(t);
  auto store = [p](auto value) { std::memcpy(p, &value, sizeof(value)); };
  switch (t) {
    case DataType::kFloat32:
      store(static_cast<float>(v));
      break;
    case DataType::kFloat64:
      store(v);
      break;
    case DataType::kFloat16:
      store(ToHalf(static_cast<float>(v)));
      break;
    case DataType::kBFloat16:
      store(ToBf16(static_cast<float>(v)));
      break;
    case DataType::kInt32:
      store(static_cast<int32_t>(static_cast<int64_t>(v)));
      break;
    case DataType::kInt64:
      store(static_cast<int64_t>(v));
      break;
    case DataType::kUInt8:
      store(static_cast<uint8_t>(static_cast<int64_t>(v)));
      break;
  }
}

double Get(DataType t, const char* base, size_t i) {
  const char* p = base + i * ElementSize(t);
  auto load = [p](auto value) {
    std::memcpy(&value, p, sizeof(value));
    return value;
  };
  switch (t) {
    case DataType::kFloat32:
      return load(float{});
    case DataType::kFloat64:
      return load(double{});
    case DataType::kFloat16:
      return FromHalf(load(uint16_t{}));
    case DataType::kBFloat16:
      return FromBf16(load(uint16_t{}));
    case DataType::kInt32:
      return load(int32_t{});
    case DataType::kInt64:
      return static_cast<double>(load(int64_t{}));
    case DataType::kUInt8:
      return load(uint8_t{});
  }
  return 0;
}

// What a value of type t reads back as once stored (integers wrap, floats round).
double AsStored(DataType t, double v) {
  char one[8];
  Put(t, one, 0, v);
  return Get(t, one, 0);
}

// Member `rank`'s input element i (small values: exact in every type; products stay <= 256).
double Input(ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::kProduct) return 1 + static_cast<double>((i + rank) % 2);
  return 1 + static_cast<double>((i + 2 * rank) % 5);
}

double Expected(DataType t, ReduceOp op, int world, size_t i) {
  double result = Input(op, 0, i);
  for (int r = 1; r < world; ++r) {
    const double v = Input(op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        result += v;
        break;
      case ReduceOp::kProduct:
        result *= v;
        break;
      case ReduceOp::kMin:
        result = std::min(result, v);
        break;
      case ReduceOp::kMax:
        result = std::max(result, v);
        break;
    }
  }
  if (op == ReduceOp::kAvg) result = IsFloat(t) ? result / world : std::floor(result / world);
  return AsStored(t, result);
}

// Collects mismatches ("AllReduce f16 sum: element 7 is 3, expected 4"), a few per check.
class Checker {
 public:
  void Expect(const std::string& what, DataType t, const std::vector<char>& got, size_t i,
              double expected) {
    const double value = Get(t, got.data(), i);
    const double tolerance = IsFloat(t) ? 1e-2 * std::fabs(expected) + 1e-6 : 0;
    if (std::fabs(value - expected) <= tolerance) return;
    if (++count_[what] <= 3) {
      failures_.push_back(
          absl::StrCat(what, ": element ", i, " is ", value, ", expected ", expected));
    }
  }
  void Fail(const std::string& what) { failures_.push_back(what); }
  std::string Report() const { return absl::StrJoin(failures_, "\n"); }

 private:
  std::map<std::string, int> count_;
  std::vector<std::string> failures_;
};

// A device buffer of n elements of type t.
class DeviceBuffer {
 public:
  DeviceBuffer(DataType t, size_t n) : type_(t), bytes_(n * ElementSize(t)) {
    if (cudaMalloc(&data_, bytes_ ? bytes_ : 1) != cudaSuccess) {
      throw std::runtime_error("cudaMalloc of " + std::to_string(bytes_) + " bytes failed");
    }
  }
  ~DeviceBuffer() { cudaFree(data_); }
  void* data() { return data_; }
  void Upload(const std::vector<char>& host) {
    if (cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice) != cudaSuccess) {
      throw std::runtime_error("cudaMemcpy to the device failed");
    }
  }
  std::vector<char> Download() {
    std::vector<char> host(bytes_);
    if (cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost) != cudaSuccess) {
      throw std::runtime_error("cudaMemcpy from the device failed");
    }
    return host;
  }

 private:
  DataType type_;
  size_t bytes_;
  void* data_ = nullptr;
};

std::vector<char> Inputs(DataType t, ReduceOp op, int rank, size_t n, size_t offset = 0) {
  std::vector<char> host(n * ElementSize(t));
  for (size_t i = 0; i < n; ++i) Put(t, host.data(), i, Input(op, rank, offset + i));
  return host;
}

const DataType kTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                           DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                           DataType::kUInt8};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax,
                         ReduceOp::kAvg};

// Every operation, reduction and type in group `group` as member `rank` of `world`, checked
// against the expected values; "" when all are right, else what was wrong. Sync and async calls
// alternate. The same code runs as the world of one (the test process) and as each actor of a
// multi-GPU group.
std::string RunEveryOp(const std::string& group, int world, int rank, size_t n) {
  Checker check;
  try {
    for (DataType t : kTypes) {
      for (ReduceOp op : kOps) {
        const std::string what = absl::StrCat(TypeName(t), " ", OpName(op));
        DeviceBuffer data(t, n);
        data.Upload(Inputs(t, op, rank, n));
        if (op == ReduceOp::kMax) {
          coll::AllReduceAsync(data.data(), n, t, op, group).Wait();
        } else {
          coll::AllReduce(data.data(), n, t, op, group);
        }
        std::vector<char> got = data.Download();
        for (size_t i = 0; i < n; ++i)
          check.Expect("AllReduce " + what, t, got, i, Expected(t, op, world, i));

        // ReduceScatter: member r gets the reduction of elements [r*n, (r+1)*n).
        DeviceBuffer send(t, n * world), recv(t, n);
        send.Upload(Inputs(t, op, rank, n * world));
        coll::ReduceScatter(send.data(), recv.data(), n, t, op, group);
        got = recv.Download();
        for (size_t i = 0; i < n; ++i) {
          check.Expect("ReduceScatter " + what, t, got, i, Expected(t, op, world, rank * n + i));
        }

        // Reduce to the last rank; the others' buffers are left as they were.
        const int root = world - 1;
        data.Upload(Inputs(t, op, rank, n));
        coll::ReduceAsync(data.data(), n, t, op, root, group).Wait();
        got = data.Download();
        for (size_t i = 0; i < n; ++i) {
          check.Expect("Reduce " + what, t, got, i,
                       rank == root ? Expected(t, op, world, i) : AsStored(t, Input(op, rank, i)));
        }
      }
      // AllGather: member r's n elements at [r*n, (r+1)*n) everywhere.
      const std::string type = TypeName(t);
      DeviceBuffer send(t, n), recv(t, n * world);
      send.Upload(Inputs(t, ReduceOp::kSum, rank, n));
      coll::AllGatherAsync(send.data(), recv.data(), n, t, group).Wait();
      std::vector<char> got = recv.Download();
      for (int r = 0; r < world; ++r) {
        for (size_t i = 0; i < n; ++i) {
          check.Expect("AllGather " + type, t, got, r * n + i,
                       AsStored(t, Input(ReduceOp::kSum, r, i)));
        }
      }
      // Broadcast from rank 0 (a world of one: the buffer keeps its values).
      DeviceBuffer data(t, n);
      data.Upload(Inputs(t, ReduceOp::kSum, rank, n));
      coll::Broadcast(data.data(), n, t, 0, group);
      got = data.Download();
      for (size_t i = 0; i < n; ++i) {
        check.Expect("Broadcast " + type, t, got, i, AsStored(t, Input(ReduceOp::kSum, 0, i)));
      }
    }
    coll::Barrier(group);
    coll::BarrierAsync(group).Wait();
  } catch (const std::exception& error) {
    check.Fail(absl::StrCat("threw: ", error.what()));
  }
  return check.Report();
}

// --- Actors --------------------------------------------------------------------------------------

class NcclMember {
 public:
  static NcclMember* Create() { return new NcclMember(); }

  // Joins `group` as rank of world. host_id: NCCL_HOSTID for this process ("" unsets it; two
  // members with different ids may share a GPU, NCCL taking them for two hosts).
  std::string Join(int world, int rank, std::string group, std::string host_id,
                   int64_t timeout_ms) {
    if (host_id.empty()) {
      unsetenv("NCCL_HOSTID");
    } else {
      setenv("NCCL_HOSTID", host_id.c_str(), 1);
      setenv("NCCL_RUNTIME_CONNECT", "0", 1);  // connect at init, not in the first operation
    }
    coll::GroupOptions options;
    options.timeout = std::chrono::milliseconds(timeout_ms);
    options.rendezvous_timeout = std::chrono::seconds(60);
    try {
      coll::InitGroup(world, rank, coll::Backend::kNccl, group, options);
    } catch (const std::exception& error) {
      return absl::StrCat("ERR ", error.what());
    }
    return "OK";
  }

  std::string EveryOp(std::string group, int world, int rank) {
    return RunEveryOp(group, world, rank, 4099);
  }

  // An all-reduce expected to fail: "ERR <rank at fault>: <message>" or "OK", then whether the
  // GPU is free afterwards.
  std::string AllReduceAndSync(std::string group, int64_t count) {
    DeviceBuffer data(DataType::kFloat32, count);
    std::string result = "OK";
    try {
      coll::AllReduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum, group);
    } catch (const coll::CollectiveError& error) {
      result = absl::StrCat("ERR ", error.rank(), ": ", error.what());
    }
    std::string sync = SynchronizeWithin(10);
    return sync.empty() ? result : absl::StrCat(result, "\nGPU NOT FREE: ", sync);
  }

  // The timed-out operation of NcclTest.TimedOutOpLeavesNoSpinningKernel (rank 0 of a world of
  // two whose rank 1 never calls it): "" when everything held, else what went wrong.
  std::string TimeOutThenRecover(std::string group) {
    const size_t n = 1 << 20;
    DeviceBuffer data(DataType::kFloat32, n);
    coll::CallOptions call;
    call.timeout = std::chrono::milliseconds(2000);
    try {
      coll::AllReduce(data.data(), n, DataType::kFloat32, ReduceOp::kSum, group, call);
      return "could not make an NCCL kernel that cannot finish on this GPU: the all-reduce of a "
             "world of two whose rank 1 never called it completed";
    } catch (const coll::CollectiveError& error) {
      // The kernel must have been running: a timeout while NCCL still set up on the host proves
      // nothing about kernels.
      if (std::string(error.what()).find("waiting for the NCCL kernel") == std::string::npos) {
        return absl::StrCat(
            "could not make an NCCL kernel that cannot finish on this GPU: the all-reduce failed "
            "before its kernel ran: ",
            error.what());
      }
    }
    if (std::string sync = SynchronizeWithin(10); !sync.empty()) return sync;
    // The broken group fails fast, naming the way out.
    try {
      coll::AllReduce(data.data(), n, DataType::kFloat32, ReduceOp::kSum, group);
      return "an all-reduce on the broken group succeeded";
    } catch (const coll::CollectiveError& error) {
      if (std::string(error.what()).find("DestroyGroup") == std::string::npos) {
        return absl::StrCat("the broken group's error does not say to destroy it: ", error.what());
      }
    }
    // Created again under the same name (a world of one here), it works.
    coll::DestroyGroup(group);
    try {
      coll::InitGroup(1, 0, coll::Backend::kNccl, group);
    } catch (const std::exception& error) {
      return absl::StrCat("re-creating the group after the failure failed: ", error.what());
    }
    std::string ops = RunEveryOp(group, 1, 0, 257);
    coll::DestroyGroup(group);
    return ops.empty() ? "" : "the re-created group: " + ops;
  }

  std::string Leave(std::string group) {
    coll::DestroyGroup(group);
    return "OK";
  }

  // Exits the process `delay_ms` from now, without leaving any group.
  std::string DieIn(int64_t delay_ms) {
    std::thread([delay_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      std::_Exit(1);
    }).detach();
    return "OK";
  }
};

TROUPE_REMOTE(NcclMember::Create, &NcclMember::Join, &NcclMember::EveryOp,
              &NcclMember::AllReduceAndSync, &NcclMember::TimeOutThenRecover, &NcclMember::Leave,
              &NcclMember::DieIn);

using Member = troupe::ActorHandle<NcclMember>;

std::vector<Member> StartMembers(int count, double gpus_each) {
  std::vector<Member> members;
  for (int i = 0; i < count; ++i) {
    members.push_back(
        troupe::Actor(NcclMember::Create).SetResources({{"GPU", gpus_each}}).Remote());
  }
  return members;
}

// Joins every member to `group` (rank = index) and returns their answers.
std::vector<std::string> JoinAll(std::vector<Member>& members, const std::string& group,
                                 const std::vector<std::string>& host_ids, int64_t timeout_ms) {
  std::vector<troupe::ObjectRef<std::string>> joins;
  const int world = static_cast<int>(members.size());
  for (int r = 0; r < world; ++r) {
    joins.push_back(
        members[r].Task(&NcclMember::Join).Remote(world, r, group, host_ids[r], timeout_ms));
  }
  std::vector<std::string> answers;
  for (auto& join : joins) answers.push_back(*troupe::Get(join));
  return answers;
}

// --- NcclTest: one GPU -------------------------------------------------------------------------

TEST(NcclTest, EveryOpReductionAndTypeAtWorldOfOne) {
  GPUS_OR_SKIP(gpus);
  EnsureCluster(gpus);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  coll::InitGroup(1, 0, coll::Backend::kNccl, "one");
  for (size_t n : {size_t{1}, size_t{1000}, size_t{(1 << 20) + 3}}) {
    std::string failures = RunEveryOp("one", 1, 0, n);
    EXPECT_TRUE(failures.empty()) << "with " << n << " elements:\n" << failures;
  }
  coll::DestroyGroup("one");
}

TEST(NcclTest, AsyncCallsRunInOrderAndComplete) {
  GPUS_OR_SKIP(gpus);
  EnsureCluster(gpus);
  coll::InitGroup(1, 0, coll::Backend::kNccl, "async");
  const size_t n = 100000;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<coll::Work> works;
  for (int k = 0; k < 8; ++k) {
    buffers.push_back(std::make_unique<DeviceBuffer>(DataType::kInt32, n));
    buffers.back()->Upload(Inputs(DataType::kInt32, ReduceOp::kSum, k, n));
    works.push_back(
        coll::AllReduceAsync(buffers.back()->data(), n, DataType::kInt32, ReduceOp::kSum, "async"));
  }
  works.push_back(coll::BarrierAsync("async"));
  for (auto& work : works) work.Wait();
  for (auto& work : works) EXPECT_TRUE(work.IsCompleted());
  for (int k = 0; k < 8; ++k) {
    std::vector<char> got = buffers[k]->Download();
    EXPECT_EQ(Get(DataType::kInt32, got.data(), 0), Input(ReduceOp::kSum, k, 0)) << "buffer " << k;
    EXPECT_EQ(Get(DataType::kInt32, got.data(), n - 1), Input(ReduceOp::kSum, k, n - 1))
        << "buffer " << k;
  }
  coll::DestroyGroup("async");
}

TEST(NcclTest, HostMemoryIsRefusedNamingCallAndGroupAndTheGroupGoesOn) {
  GPUS_OR_SKIP(gpus);
  EnsureCluster(gpus);
  coll::InitGroup(1, 0, coll::Backend::kNccl, "hostmem");
  std::vector<float> pageable(1000, 1.0f);
  try {
    coll::AllReduce(pageable.data(), pageable.size(), DataType::kFloat32, ReduceOp::kSum,
                    "hostmem");
    ADD_FAILURE() << "an all-reduce of pageable host memory on an NCCL group was accepted";
  } catch (const coll::CollectiveError& error) {
    EXPECT_NE(std::string(error.what()).find("AllReduce on NCCL group 'hostmem'"),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("Move the tensor to the GPU"), std::string::npos)
        << error.what();
  }
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 1000 * sizeof(float)), cudaSuccess);
  DeviceBuffer device(DataType::kFloat32, 1000);
  try {
    coll::AllGather(device.data(), pinned, 1000, DataType::kFloat32, "hostmem");
    ADD_FAILURE() << "an all-gather into pinned host memory on an NCCL group was accepted";
  } catch (const coll::CollectiveError& error) {
    EXPECT_NE(std::string(error.what()).find("AllGather on NCCL group 'hostmem'"),
              std::string::npos)
        << error.what();
  }
  cudaFreeHost(pinned);
  // Refused calls do not break the group; managed memory is GPU memory.
  float* managed = nullptr;
  ASSERT_EQ(cudaMallocManaged(&managed, 1000 * sizeof(float)), cudaSuccess);
  for (int i = 0; i < 1000; ++i) managed[i] = 2.5f;
  coll::AllReduce(managed, 1000, DataType::kFloat32, ReduceOp::kSum, "hostmem");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(managed[999], 2.5f);
  cudaFree(managed);
  coll::DestroyGroup("hostmem");
}

TEST(NcclTest, LeasedGpuTheProcessCannotSeeIsRefused) {
  GPUS_OR_SKIP(gpus);
  EnsureCluster(gpus);
  setenv("TROUPE_GPU_IDS", std::to_string(gpus).c_str(), 1);  // one past the last device
  try {
    coll::InitGroup(1, 0, coll::Backend::kNccl, "lease");
    coll::DestroyGroup("lease");
    ADD_FAILURE() << "a group was created on leased GPU " << gpus << " of " << gpus;
  } catch (const coll::CollectiveError& error) {
    EXPECT_NE(std::string(error.what()).find("leased GPU " + std::to_string(gpus)),
              std::string::npos)
        << error.what();
  }
  unsetenv("TROUPE_GPU_IDS");
}

TEST(NcclTest, TwoMembersOnOneGpuAreRefusedNamingBoth) {
  GPUS_OR_SKIP(gpus);
  EnsureCluster(gpus);
  // Two half-GPU actors get GPU 0 both.
  std::vector<Member> members = StartMembers(2, 0.5);
  std::vector<std::string> answers = JoinAll(members, "shared", {"", ""}, 60000);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(answers[r].find("ranks 0 and 1 both use GPU"), std::string::npos)
        << "rank " << r << ": " << answers[r];
    EXPECT_EQ(answers[r].find("NCCL error"), std::string::npos)
        << "refused by NCCL rather than up front: " << answers[r];
  }
  for (auto& member : members) member.Kill();
}

TEST(NcclTest, TimedOutOpLeavesNoSpinningKernel) {
  GPUS_OR_SKIP(gpus);
  EnsureCluster(gpus);
  // A world of two on one GPU: NCCL_HOSTID makes NCCL take the members for two hosts (so it
  // accepts one GPU for both and connects them over its socket transport). After one all-reduce
  // together, rank 1 never calls the next, so rank 0's NCCL kernel waits for it until rank 0's
  // timeout (2 s); the abort must stop that kernel.
  std::vector<Member> members = StartMembers(2, 0.5);
  std::vector<std::string> answers =
      JoinAll(members, "stuck", {"troupe-nccl-test-0", "troupe-nccl-test-1"}, 20000);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(answers[r], "OK") << "could not make an NCCL kernel that cannot finish on this GPU: "
                                   "the world of two did not form: rank "
                                << r << ": " << answers[r];
  }
  // One all-reduce together first: NCCL's connections are up before the one that gets stuck.
  auto warm0 = members[0].Task(&NcclMember::AllReduceAndSync).Remote("stuck", 1 << 20);
  auto warm1 = members[1].Task(&NcclMember::AllReduceAndSync).Remote("stuck", 1 << 20);
  ASSERT_EQ(*troupe::Get(warm0), "OK") << "the world of two on one GPU could not all-reduce";
  ASSERT_EQ(*troupe::Get(warm1), "OK") << "the world of two on one GPU could not all-reduce";
  std::string result =
      *troupe::Get(members[0].Task(&NcclMember::TimeOutThenRecover).Remote("stuck"));
  EXPECT_EQ(result, "") << result;
  for (auto& member : members) member.Kill();
}

// --- NcclMultiGpuTest: one actor per GPU --------------------------------------------------------

TEST(NcclMultiGpuTest, EveryOpOneActorPerGpu) {
  NEEDS_TWO_GPUS(gpus);
  EnsureCluster(gpus);
  std::vector<Member> members = StartMembers(gpus, 1);
  std::vector<std::string> answers =
      JoinAll(members, "gpus", std::vector<std::string>(gpus), 120000);
  for (int r = 0; r < gpus; ++r) ASSERT_EQ(answers[r], "OK") << "rank " << r;
  std::vector<troupe::ObjectRef<std::string>> results;
  for (int r = 0; r < gpus; ++r) {
    results.push_back(members[r].Task(&NcclMember::EveryOp).Remote("gpus", gpus, r));
  }
  for (int r = 0; r < gpus; ++r) {
    std::string failures = *troupe::Get(results[r]);
    EXPECT_EQ(failures, "") << "rank " << r << ":\n" << failures;
  }
  for (auto& member : members) member.Kill();
}

TEST(NcclMultiGpuTest, MemberKilledMidOpFailsTheOthersNamingIt) {
  NEEDS_TWO_GPUS(gpus);
  EnsureCluster(gpus);
  std::vector<Member> members = StartMembers(gpus, 1);
  std::vector<std::string> answers =
      JoinAll(members, "killed", std::vector<std::string>(gpus), 60000);
  for (int r = 0; r < gpus; ++r) ASSERT_EQ(answers[r], "OK") << "rank " << r;
  // The last rank dies 2 s into the others' all-reduce, which it never calls.
  const int victim = gpus - 1;
  std::vector<troupe::ObjectRef<std::string>> results;
  for (int r = 0; r < victim; ++r) {
    results.push_back(members[r].Task(&NcclMember::AllReduceAndSync).Remote("killed", 1 << 20));
  }
  troupe::Get(members[victim].Task(&NcclMember::DieIn).Remote(2000));
  for (int r = 0; r < victim; ++r) {
    std::string result = *troupe::Get(results[r]);
    EXPECT_EQ(result.rfind("ERR " + std::to_string(victim) + ":", 0), 0u)
        << "rank " << r << " should fail naming rank " << victim << ": " << result;
    EXPECT_EQ(result.find("GPU NOT FREE"), std::string::npos) << "rank " << r << ": " << result;
  }
  for (int r = 0; r < victim; ++r) members[r].Kill();
}

TEST(NcclMultiGpuTest, MismatchedCallsFailWithoutHangingTheGpu) {
  NEEDS_TWO_GPUS(gpus);
  EnsureCluster(gpus);
  std::vector<Member> members = StartMembers(gpus, 1);
  std::vector<std::string> answers =
      JoinAll(members, "mismatch", std::vector<std::string>(gpus), 5000);
  for (int r = 0; r < gpus; ++r) ASSERT_EQ(answers[r], "OK") << "rank " << r;
  // Rank 0 all-reduces half as many elements as the others: the others wait for data that never
  // comes and time out (5 s); nobody hangs and every GPU is free afterwards.
  std::vector<troupe::ObjectRef<std::string>> results;
  for (int r = 0; r < gpus; ++r) {
    results.push_back(members[r]
                          .Task(&NcclMember::AllReduceAndSync)
                          .Remote("mismatch", r == 0 ? 1 << 19 : 1 << 20));
  }
  int failed = 0;
  for (int r = 0; r < gpus; ++r) {
    std::string result = *troupe::Get(results[r]);
    if (result.rfind("ERR", 0) == 0) ++failed;
    EXPECT_EQ(result.find("GPU NOT FREE"), std::string::npos) << "rank " << r << ": " << result;
  }
  EXPECT_GE(failed, 1) << "mismatched all-reduces all succeeded";
  for (auto& member : members) member.Kill();
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  if (troupe::IsInitialized()) troupe::Shutdown();
  return result;
}
