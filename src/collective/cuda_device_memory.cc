// DeviceMemory on the CUDA runtime (CUDA builds only; registers itself when linked in).
//
// Which memory is device memory is asked of the driver (cuPointerGetAttribute, looked up in the
// already-loaded libcuda): a process that never used CUDA has not loaded it, and then every
// pointer is host memory without a single CUDA call — so a CPU group in a CUDA build creates no
// CUDA context and never fails for want of a driver or a GPU. Copies run on a dedicated
// non-blocking stream per operation (pooled), after an event recorded on the caller's stream;
// pinned buffers come from cudaHostAlloc. CUDA errors become Status in cuda_status.h.
// Thread-safe: the lane pool is locked; a CudaCopyQueue belongs to one operation.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "src/collective/cuda_status.h"
#include "src/collective/device_memory.h"

namespace troupe::collective {
namespace {

using PointerGetAttribute = CUresult (*)(void* data, CUpointer_attribute attribute,
                                         CUdeviceptr ptr);

// A copy stream and its events, reused across operations on one device.
struct Lane {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;      // recorded on the caller's stream
  std::vector<cudaEvent_t> events;  // one per copy, and one for OrderCallerAfterCopies
};

class CudaDeviceMemory;

class CudaCopyQueue : public CopyQueue {
 public:
  CudaCopyQueue(CudaDeviceMemory* owner, std::unique_ptr<Lane> lane, cudaStream_t caller,
                int previous_device)
      : owner_(owner), lane_(std::move(lane)), caller_(caller), previous_device_(previous_device) {}
  ~CudaCopyQueue() override;

  absl::StatusOr<int> Copy(void* dst, const void* src, size_t bytes,
                           CopyDirection direction) override {
    const cudaMemcpyKind kind =
        direction == CopyDirection::kToHost ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
    if (auto s =
            CudaToStatus(cudaMemcpyAsync(dst, src, bytes, kind, lane_->stream), "cudaMemcpyAsync");
        !s.ok()) {
      return s;
    }
    auto event = NextEvent();
    if (!event.ok()) return event.status();
    return used_ - 1;
  }

  absl::Status Wait(int ticket) override {
    return CudaToStatus(cudaEventSynchronize(lane_->events.at(ticket)), "cudaEventSynchronize");
  }

  absl::Status OrderCallerAfterCopies() override {
    auto event = NextEvent();
    if (!event.ok()) return event.status();
    return CudaToStatus(cudaStreamWaitEvent(caller_, *event, 0), "cudaStreamWaitEvent");
  }

 private:
  // Records the next event on the copy stream (after the copies started so far).
  absl::StatusOr<cudaEvent_t> NextEvent() {
    if (used_ == static_cast<int>(lane_->events.size())) {
      cudaEvent_t event;
      if (auto s = CudaToStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                                "cudaEventCreate");
          !s.ok()) {
        return s;
      }
      lane_->events.push_back(event);
    }
    cudaEvent_t event = lane_->events[used_++];
    if (auto s = CudaToStatus(cudaEventRecord(event, lane_->stream), "cudaEventRecord"); !s.ok()) {
      return s;
    }
    return event;
  }

  CudaDeviceMemory* owner_;
  std::unique_ptr<Lane> lane_;
  cudaStream_t caller_;
  int previous_device_;
  int used_ = 0;
};

class CudaDeviceMemory : public DeviceMemory {
 public:
  bool IsDevice(const void* ptr) override {
    PointerGetAttribute get = Driver();
    if (get == nullptr) return false;
    const auto address = reinterpret_cast<CUdeviceptr>(ptr);
    unsigned int type = 0, managed = 0;
    if (get(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address) != CUDA_SUCCESS) return false;
    if (type != CU_MEMORYTYPE_DEVICE) return false;
    // Managed memory is readable by the CPU: no staging.
    if (get(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, address) == CUDA_SUCCESS && managed) {
      return false;
    }
    return true;
  }

  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    void* ptr = nullptr;
    if (auto s = CudaToStatus(cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable),
                              "cudaHostAlloc (pinned staging buffer)");
        !s.ok()) {
      return s;
    }
    return ptr;
  }

  void FreeHost(void* ptr) override { cudaFreeHost(ptr); }

  absl::StatusOr<std::unique_ptr<CopyQueue>> NewCopyQueue(const void* device_ptr,
                                                          void* stream) override {
    PointerGetAttribute get = Driver();
    int device = 0;
    if (get == nullptr || get(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                              reinterpret_cast<CUdeviceptr>(device_ptr)) != CUDA_SUCCESS) {
      return absl::InvalidArgumentError(
          "the CUDA driver cannot tell which device holds the buffer");
    }
    int previous = 0;
    if (auto s = CudaToStatus(cudaGetDevice(&previous), "cudaGetDevice"); !s.ok()) return s;
    if (auto s = CudaToStatus(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
    auto lane = TakeLane(device);
    if (!lane.ok()) {
      cudaSetDevice(previous);
      return lane.status();
    }
    cudaStream_t caller = stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamLegacy;
    Lane& l = **lane;
    absl::Status s = CudaToStatus(cudaEventRecord(l.start, caller), "cudaEventRecord");
    if (s.ok()) s = CudaToStatus(cudaStreamWaitEvent(l.stream, l.start, 0), "cudaStreamWaitEvent");
    auto queue = std::make_unique<CudaCopyQueue>(this, std::move(*lane), caller, previous);
    if (!s.ok()) return s;  // the queue's destructor returns the lane
    return std::unique_ptr<CopyQueue>(std::move(queue));
  }

  void ReturnLane(std::unique_ptr<Lane> lane) {
    absl::MutexLock lock(&mu_);
    lanes_.push_back(std::move(lane));
  }

 private:
  // cuPointerGetAttribute from a libcuda the process has already loaded; null while it has not.
  PointerGetAttribute Driver() {
    PointerGetAttribute get = get_.load(std::memory_order_acquire);
    if (get != nullptr) return get;
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (library == nullptr) return nullptr;
    get = reinterpret_cast<PointerGetAttribute>(dlsym(library, "cuPointerGetAttribute"));
    get_.store(get, std::memory_order_release);  // the handle stays open: libcuda stays loaded
    return get;
  }

  absl::StatusOr<std::unique_ptr<Lane>> TakeLane(int device) {
    {
      absl::MutexLock lock(&mu_);
      for (auto it = lanes_.begin(); it != lanes_.end(); ++it) {
        if ((*it)->device == device) {
          std::unique_ptr<Lane> lane = std::move(*it);
          lanes_.erase(it);
          return lane;
        }
      }
    }
    auto lane = std::make_unique<Lane>();
    lane->device = device;
    if (auto s = CudaToStatus(cudaStreamCreateWithFlags(&lane->stream, cudaStreamNonBlocking),
                              "cudaStreamCreate");
        !s.ok()) {
      return s;
    }
    if (auto s = CudaToStatus(cudaEventCreateWithFlags(&lane->start, cudaEventDisableTiming),
                              "cudaEventCreate");
        !s.ok()) {
      cudaStreamDestroy(lane->stream);
      return s;
    }
    return lane;
  }

  std::atomic<PointerGetAttribute> get_{nullptr};
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Lane>> lanes_ ABSL_GUARDED_BY(mu_);
};

CudaCopyQueue::~CudaCopyQueue() {
  // Copies still running write the caller's buffer or read our pinned slots: let them finish.
  cudaStreamSynchronize(lane_->stream);
  owner_->ReturnLane(std::move(lane_));
  cudaSetDevice(previous_device_);
}

const bool registered = [] {
  RegisterDeviceMemoryFactory([] { return std::make_unique<CudaDeviceMemory>(); });
  return true;
}();

}  // namespace
}  // namespace troupe::collective
