// The device helpers of troupe/train_torch.h, without a cluster: which device a worker trains on
// (from the lease and the node's GPU visibility), and the clear error a CPU-only LibTorch gives
// when asked for CUDA. The Bazel build links Debian's CPU-only LibTorch; with a CUDA LibTorch the
// CUDA cases check the device numbers instead.
#include "troupe/train_torch.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "troupe/errors.h"

namespace {

using troupe::train::torch::CudaDevice;
using troupe::train::torch::LibTorchHasCuda;
using troupe::train::torch::WorkerDevice;

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
    had_ = old != nullptr;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// The error text of `fn`, or "" if it did not throw TroupeError.
template <typename Fn>
std::string ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const troupe::TroupeError& e) {
    return e.what();
  }
  return "";
}

TEST(WorkerDeviceTest, AWorkerWithoutAGpuLeaseTrainsOnTheCpu) {
  ScopedEnv ids("TROUPE_GPU_IDS", nullptr);
  EXPECT_EQ(WorkerDevice(), torch::Device(torch::kCPU));
}

TEST(WorkerDeviceTest, AGpuLeaseOnACpuOnlyLibTorchIsAClearError) {
  if (LibTorchHasCuda()) {
    // A CUDA LibTorch: the lease picks the device (all: the index; assigned: device 0).
    if (torch::cuda::device_count() < 1) GTEST_SKIP() << "a CUDA LibTorch without a GPU";
    ScopedEnv ids("TROUPE_GPU_IDS", "0");
    ScopedEnv visibility("TROUPE_GPU_VISIBILITY", "assigned");
    EXPECT_EQ(WorkerDevice(), torch::Device(torch::kCUDA, 0));
    return;
  }
  ScopedEnv ids("TROUPE_GPU_IDS", "1");
  ScopedEnv visibility("TROUPE_GPU_VISIBILITY", "all");
  const std::string error = ErrorOf([] { WorkerDevice(); });
  EXPECT_NE(error.find("this LibTorch has no CUDA"), std::string::npos) << error;
  EXPECT_NE(error.find("build against a CUDA LibTorch"), std::string::npos) << error;
}

TEST(CudaDeviceTest, ReportsWhatIsMissing) {
  if (!LibTorchHasCuda()) {
    const std::string error = ErrorOf([] { CudaDevice(0); });
    EXPECT_NE(error.find("this LibTorch has no CUDA"), std::string::npos) << error;
    return;
  }
  const int count = static_cast<int>(torch::cuda::device_count());
  const std::string error = ErrorOf([&] { CudaDevice(count); });  // one past the last
  EXPECT_NE(error.find(count == 0 ? "sees no CUDA device" : "does not exist"), std::string::npos)
      << error;
}

}  // namespace
