// Test double for DeviceMemory: "device" buffers the CPU cannot touch (a PROT_NONE reservation
// whose bytes live in a shadow copy: a direct CPU access crashes the test), pinned buffers that
// are plain heap memory, and copy queues that run lazily, in order, like a CUDA stream nobody
// drives: a copy happens when something waits for it (Wait, or the queue's destructor) or when
// the test calls RunCopies() — e.g. from inside a collective, to show the copy was in flight
// while the collective ran. Every step goes to an event log the test reads.
//
// FakeStream plays the caller's CUDA stream: work queued on it runs before the copies of a queue
// made on it, and the queue notes when the caller's later work was ordered after its copies.
// Thread-safe (one recursive mutex: caller work may Upload); queues belong to one operation.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/collective/device_memory.h"

namespace troupe::collective {

struct FakeStream {
  // Work queued by the caller and not run yet (e.g. kernels writing the buffer).
  std::vector<std::function<void()>> pending;
};

class FakeDeviceMemory : public DeviceMemory {
 public:
  ~FakeDeviceMemory() override {
    for (auto& [base, buffer] : device_) munmap(base, buffer.reserved);
  }

  // A device buffer of `bytes` (inaccessible to the CPU); Upload/Download reach its contents.
  void* AllocateDevice(size_t bytes) {
    const size_t page = sysconf(_SC_PAGESIZE);
    const size_t reserved = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
    void* base = mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    std::lock_guard<std::recursive_mutex> lock(mu_);
    device_[static_cast<char*>(base)] = {reserved, std::vector<char>(bytes)};
    return base;
  }
  void Upload(void* device, const void* host, size_t bytes) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    std::memcpy(Shadow(device, bytes), host, bytes);
  }
  void Download(void* host, const void* device, size_t bytes) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    std::memcpy(host, Shadow(device, bytes), bytes);
  }

  bool IsDevice(const void* ptr) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return Find(ptr) != nullptr;
  }
  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    char* ptr = new char[bytes];
    pinned_[ptr] = bytes;
    Log(absl::StrCat("pin ", bytes));
    return ptr;
  }
  void FreeHost(void* ptr) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    pinned_.erase(static_cast<char*>(ptr));
    delete[] static_cast<char*>(ptr);
  }
  absl::StatusOr<std::unique_ptr<CopyQueue>> NewCopyQueue(const void* device_ptr,
                                                          void* stream) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (Find(device_ptr) == nullptr) {
      problems_.push_back("NewCopyQueue on a host pointer");
    }
    auto queue = std::make_unique<Queue>(this, static_cast<FakeStream*>(stream));
    queues_.insert(queue.get());
    Log("queue");
    return std::unique_ptr<CopyQueue>(std::move(queue));
  }

  // Runs every copy started so far, in every queue (what a busy GPU would have done by now).
  void RunCopies() {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    for (Queue* queue : queues_) queue->RunLocked(queue->started_);
  }
  // Something a collective or the test wants in the same log.
  void Note(const std::string& event) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Log(event);
  }
  std::vector<std::string> events() {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return events_;
  }
  // Misuse seen (a copy between the wrong kinds of memory, from unpinned memory, ...).
  std::vector<std::string> problems() {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return problems_;
  }
  size_t pinned_buffers() {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return pinned_.size();
  }

 private:
  struct Buffer {
    size_t reserved;
    std::vector<char> shadow;
  };
  struct PendingCopy {
    void* dst;
    const void* src;
    size_t bytes;
    CopyDirection direction;
  };

  class Queue : public CopyQueue {
   public:
    Queue(FakeDeviceMemory* owner, FakeStream* stream) : owner_(owner) {
      if (stream != nullptr) {
        caller_work_ = std::move(stream->pending);
        stream->pending.clear();
      }
    }
    ~Queue() override {
      std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
      RunLocked(started_);
      owner_->queues_.erase(this);
    }
    absl::StatusOr<int> Copy(void* dst, const void* src, size_t bytes,
                             CopyDirection direction) override {
      std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
      copies_.push_back({dst, src, bytes, direction});
      owner_->Log(absl::StrCat("start ", Name(direction), " ", started_));
      return started_++;
    }
    absl::Status Wait(int ticket) override {
      std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
      if (ticket < 0 || ticket >= started_) {
        owner_->problems_.push_back(absl::StrCat("Wait on unknown ticket ", ticket));
        return absl::InvalidArgumentError("unknown ticket");
      }
      RunLocked(ticket + 1);
      return absl::OkStatus();
    }
    absl::Status OrderCallerAfterCopies() override {
      std::lock_guard<std::recursive_mutex> lock(owner_->mu_);
      owner_->Log(absl::StrCat("caller after ", started_));
      return absl::OkStatus();
    }
    // Runs copies until `until` have run (caller's queued work first).
    void RunLocked(int until) {
      for (auto& work : caller_work_) work();
      if (!caller_work_.empty()) owner_->Log("caller work");
      caller_work_.clear();
      for (; done_ < until; ++done_) {
        const PendingCopy& c = copies_[done_];
        owner_->Execute(c);
        owner_->Log(absl::StrCat("done ", Name(c.direction), " ", done_));
      }
    }
    int started_ = 0;

   private:
    static const char* Name(CopyDirection d) { return d == CopyDirection::kToHost ? "d2h" : "h2d"; }
    FakeDeviceMemory* owner_;
    std::vector<std::function<void()>> caller_work_;
    std::deque<PendingCopy> copies_;
    int done_ = 0;
  };

  void Log(const std::string& event) { events_.push_back(event); }

  // The buffer holding `ptr`: {base, buffer}, or null.
  std::pair<char* const, Buffer>* Find(const void* ptr) {
    const char* p = static_cast<const char*>(ptr);
    auto it = device_.upper_bound(const_cast<char*>(p));
    if (it == device_.begin()) return nullptr;
    --it;
    if (p >= it->first + it->second.reserved) return nullptr;
    return &*it;
  }
  char* Shadow(const void* device, size_t bytes) {
    auto* found = Find(device);
    const size_t offset = found == nullptr ? 0 : static_cast<const char*>(device) - found->first;
    if (found == nullptr || offset + bytes > found->second.shadow.size()) {
      problems_.push_back("device access out of bounds");
      static std::vector<char> junk;
      junk.resize(bytes);
      return junk.data();
    }
    return found->second.shadow.data() + offset;
  }
  bool IsPinnedRange(const void* ptr, size_t bytes) {
    const char* p = static_cast<const char*>(ptr);
    auto it = pinned_.upper_bound(const_cast<char*>(p));
    if (it == pinned_.begin()) return false;
    --it;
    return p + bytes <= it->first + it->second;
  }
  void Execute(const PendingCopy& c) {
    const void* device = c.direction == CopyDirection::kToHost ? c.src : c.dst;
    const void* host = c.direction == CopyDirection::kToHost ? c.dst : c.src;
    if (Find(device) == nullptr) problems_.push_back("copy: the device side is host memory");
    if (!IsPinnedRange(host, c.bytes)) problems_.push_back("copy: the host side is not pinned");
    if (c.direction == CopyDirection::kToHost) {
      std::memcpy(c.dst, Shadow(c.src, c.bytes), c.bytes);
    } else {
      std::memcpy(Shadow(c.dst, c.bytes), c.src, c.bytes);
    }
  }

  std::recursive_mutex mu_;
  std::map<char*, Buffer> device_;
  std::map<char*, size_t> pinned_;
  std::set<Queue*> queues_;
  std::vector<std::string> events_;
  std::vector<std::string> problems_;
};

}  // namespace troupe::collective
