// Accelerator memory as the CPU collective backend sees it: which buffers live on a device, pinned
// host memory to stage them through, and asynchronous copies between the two that run after the
// caller's queued device work. StagingBackend (staging_backend.h) is the only user.
//
// The real implementation (cuda_device_memory.cc, CUDA builds only) registers itself when it is
// linked in; without one (CPU builds, --config=nocuda) every pointer is host memory. Tests use
// FakeDeviceMemory (fake_device_memory.h). Implementations are thread-safe: groups on several
// threads share the process's one instance; a CopyQueue belongs to one operation on one thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace troupe::collective {

enum class CopyDirection { kToHost, kToDevice };

// One operation's copies, run in the order they were started (like one CUDA stream), all after
// the work the caller had queued on its stream when the queue was made.
class CopyQueue {
 public:
  // Waits for copies still running: a failed operation leaves nothing writing behind it.
  virtual ~CopyQueue() = default;
  // Starts copying `bytes` from `src` to `dst` (one of them device memory, the other pinned host
  // memory from DeviceMemory::AllocateHost); returns a ticket for Wait.
  virtual absl::StatusOr<int> Copy(void* dst, const void* src, size_t bytes,
                                   CopyDirection direction) = 0;
  // Blocks until copy `ticket`, and every copy started before it, is done.
  virtual absl::Status Wait(int ticket) = 0;
  // Makes work the caller queues on its stream from now on run after every copy started (call
  // once the device buffers hold the results).
  virtual absl::Status OrderCallerAfterCopies() = 0;
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // True when `ptr` is device memory the CPU cannot access directly. Host, pinned host, managed
  // and unknown pointers are host memory: false.
  virtual bool IsDevice(const void* ptr) = 0;
  // Page-locked host memory of at least `bytes` (so copies run asynchronously at full speed).
  virtual absl::StatusOr<void*> AllocateHost(size_t bytes) = 0;
  virtual void FreeHost(void* ptr) = 0;
  // A queue for one operation on the device holding `device_ptr`, ordered after the work queued
  // so far on `stream` (the caller's cudaStream_t from CallOptions; nullptr: the default stream).
  virtual absl::StatusOr<std::unique_ptr<CopyQueue>> NewCopyQueue(const void* device_ptr,
                                                                  void* stream) = 0;
};

// The process's device memory: made by the registered factory on first use (nullptr without
// one, or when the factory finds no usable device: then every pointer is host memory). The
// instance lives as long as the process.
using DeviceMemoryFactory = std::function<std::unique_ptr<DeviceMemory>()>;
void RegisterDeviceMemoryFactory(DeviceMemoryFactory factory);
DeviceMemory* ProcessDeviceMemory();

}  // namespace troupe::collective
