// Streaming generators. A remote function (or actor method) whose first parameter is a
// troupe::StreamWriter<T>& is a generator: it returns void and yields values one by one with
// writer.Yield(value). Calling it (troupe::Task(f).Remote(args...), the writer left out) gives an
// ObjectRefStream<T>: the caller reads an ObjectRef<T> per yielded value, in order, as soon as
// it is produced — before the generator returns.
//
//   void Count(troupe::StreamWriter<int>& out, int n) { for (int i = 0; i < n; ++i) out.Yield(i); }
//   TROUPE_REMOTE(Count);
//   auto stream = troupe::Task(Count).Remote(3);
//   for (troupe::ObjectRef<int> ref : stream) std::cout << *troupe::Get(ref);
//
// The items are owned by the caller (the stream's owner) and reference counted as any object;
// items not read when the stream is destroyed are freed, and the generator is told to stop (its
// next Yield throws TaskCancelledError). Errors: an exception in the generator, or its worker's
// death once its retries are used up, is thrown by the Next() after the items produced before
// it (those stay readable). Backpressure (SetStreamBackpressure(n) on the call): at most n items
// wait unread; the generator's Yield blocks beyond that until the reader catches up. Lost items
// are not rebuilt (docs/api.md, "Streaming generators").
// ObjectRefStream is move-only and thread-compatible; StreamWriter is used by the generator's
// own thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "troupe/object_ref.h"
#include "troupe/runtime.h"
#include "troupe/serialization.h"

namespace troupe {

namespace internal {
[[noreturn]] void ThrowNotInitialized();
}  // namespace internal

// Given to a generator by the runtime (never constructed by users).
template <typename T>
class StreamWriter {
 public:
  // Sends `value` to the reader as the stream's next item. Blocks while the reader lags by the
  // stream's backpressure bound. Throws TaskCancelledError once the stream was cancelled or its
  // reader let go of it (let it propagate: the generator then ends), TroupeError if the reader's
  // process is gone.
  void Yield(const T& value) {
    internal::Runtime* runtime = internal::CurrentRuntime();
    if (runtime == nullptr) internal::ThrowNotInitialized();
    internal::SerializedValue serialized = internal::Serialize(value);
    runtime->ReportStreamItem(
        serialized.size(), [&](char* out) { serialized.CopyTo(out); },
        std::move(serialized.contained_refs));
    ++yielded_;
  }
  void operator()(const T& value) { Yield(value); }
  // Items yielded so far (the reader received each of them).
  int64_t yielded() const { return yielded_; }

  StreamWriter() = default;
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

 private:
  int64_t yielded_ = 0;
};

template <typename T>
class ObjectRefStream {
 public:
  ObjectRefStream() = default;
  // Takes one new local reference to the stream's end object (`end`).
  explicit ObjectRefStream(internal::RefInfo end) : end_(std::move(end)) {
    if (auto* runtime = internal::CurrentRuntime(); runtime != nullptr && !end_.object_id.empty())
      runtime->AddLocalRef(end_);
  }
  ObjectRefStream(ObjectRefStream&& other) noexcept
      : end_(std::exchange(other.end_, {})), finished_(other.finished_) {}
  ObjectRefStream& operator=(ObjectRefStream&& other) noexcept {
    if (this != &other) {
      Release();
      end_ = std::exchange(other.end_, {});
      finished_ = other.finished_;
    }
    return *this;
  }
  ObjectRefStream(const ObjectRefStream&) = delete;
  ObjectRefStream& operator=(const ObjectRefStream&) = delete;
  // Frees the items not read, and tells the generator to stop if it still runs.
  ~ObjectRefStream() { Release(); }

  // The next item, waiting until the generator yields it (forever, or up to `timeout`: then
  // GetTimeoutError, and the stream stays usable). nullopt once the generator returned and
  // every item was read. If the generator failed (it threw, its worker died and no retries are
  // left, it was cancelled), the Next() after the items it produced throws that error
  // (TaskError, TaskFailedError, TaskCancelledError, ...).
  std::optional<ObjectRef<T>> Next(
      std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
    if (finished_ || end_.object_id.empty()) return std::nullopt;
    internal::Runtime* runtime = internal::CurrentRuntime();
    if (runtime == nullptr) internal::ThrowNotInitialized();
    std::optional<internal::RefInfo> item =
        runtime->NextStreamItem(end_, timeout ? timeout->count() : -1);
    if (item) {
      ObjectRef<T> ref(*item);  // NextStreamItem held one reference for us: pass it on
      runtime->RemoveLocalRef(item->object_id);
      return ref;
    }
    finished_ = true;
    runtime->Get({end_}, -1);  // throws the error the generator ended with, if any
    return std::nullopt;
  }
  // Items produced and not read yet (they wait in this process).
  int64_t NumReady() const {
    internal::Runtime* runtime = internal::CurrentRuntime();
    if (runtime == nullptr) internal::ThrowNotInitialized();
    return runtime->NumUnreadStreamItems(end_);
  }
  // The generator task's result object (nil once it ended well): its ID in hex, and what
  // troupe::Cancel takes.
  std::string ID() const { return HexOf(end_.object_id); }
  const internal::RefInfo& info() const { return end_; }

  // `for (ObjectRef<T> ref : stream)`: Next() until the end (errors are thrown as by Next).
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = ObjectRef<T>;
    using difference_type = std::ptrdiff_t;
    using pointer = const ObjectRef<T>*;
    using reference = const ObjectRef<T>&;
    iterator() = default;
    explicit iterator(ObjectRefStream* stream) : stream_(stream) { ++*this; }
    reference operator*() const { return *current_; }
    pointer operator->() const { return &*current_; }
    iterator& operator++() {
      current_ = stream_->Next();
      if (!current_) stream_ = nullptr;
      return *this;
    }
    bool operator==(const iterator& other) const { return stream_ == other.stream_; }
    bool operator!=(const iterator& other) const { return !(*this == other); }

   private:
    ObjectRefStream* stream_ = nullptr;
    std::optional<ObjectRef<T>> current_;
  };
  iterator begin() { return iterator(this); }
  iterator end() { return iterator(); }

 private:
  void Release() {
    if (end_.object_id.empty()) return;
    if (auto* runtime = internal::CurrentRuntime()) runtime->RemoveLocalRef(end_.object_id);
    end_ = {};
  }

  internal::RefInfo end_;
  bool finished_ = false;
};

// Cancels the generator behind `stream` (as troupe::Cancel does a task): it stops at its next
// Yield (which throws TaskCancelledError), or at once with `force`; Next() then throws
// TaskCancelledError after the items already produced.
template <typename T>
void Cancel(const ObjectRefStream<T>& stream, bool force = false, bool recursive = true) {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  runtime->Cancel(stream.info(), force, recursive);
}

namespace internal {
template <typename T>
struct IsStreamWriterParam : std::false_type {};
template <typename T>
struct IsStreamWriterParam<StreamWriter<T>&> : std::true_type {
  using Item = T;
};
}  // namespace internal

}  // namespace troupe
