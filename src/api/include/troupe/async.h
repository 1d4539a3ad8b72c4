// Async actors: actor methods written as C++20 coroutines. A method returning troupe::Async<T>
// makes its class an async actor: all its calls run on ONE thread, the actor's event loop, and
// while one call waits in a co_await, the loop runs others (up to SetMaxConcurrency calls in
// flight, default 1000; per group with SetConcurrencyGroups).
//
//   #include "troupe/async.h"
//   class Proxy {
//    public:
//     static Proxy* Create(troupe::ActorHandle<Store> store) { return new Proxy{store}; }
//     troupe::Async<int> Fetch(std::string key) {
//       int value = co_await store.Task(&Store::Get).Remote(key);  // other calls run meanwhile
//       co_return value + 1;
//     }
//     troupe::ActorHandle<Store> store;
//   };
//   TROUPE_REMOTE(Proxy::Create, &Proxy::Fetch);
//
// What a coroutine may co_await: an ObjectRef<T> (a task's or actor call's result, a Put, an
// ObjectRef argument) gives the T, or throws the object's error as troupe::Get does;
// troupe::SleepFor(duration); another troupe::Async<T> (a helper coroutine). Awaiting never
// blocks the loop: the runtime says when the object is ready (a callback) and the coroutine
// resumes on the loop. A blocking call (troupe::Get, a sleep) inside a coroutine blocks every
// call of the actor: use co_await. An exception that leaves the method reaches the caller as from
// any method (TaskError at Get). troupe::Cancel on a call waiting in a co_await resumes it with
// TaskCancelledError thrown there (catch it to clean up); the caller gets TaskCancelledError.
// Parameters are taken by value (a reference would dangle once the coroutine suspends; refused at
// compile time).
//
// This header needs C++20 (g++ -std=c++20; Bazel: copts = ["-std=c++20"]); the rest of Troupe
// and its library stay C++17: the seam (troupe/runtime.h, AsyncTraits in function_registry.h) is
// plain C++17 callbacks. Every translation unit that declares an async actor's class or calls its
// methods includes this header.
// Thread-safety: an Async and its awaiters belong to the one call on the actor's event loop.
#pragma once

#if !defined(__cpp_impl_coroutine)
#error "troupe/async.h needs C++20: compile with -std=c++20 (Bazel: copts = [\"-std=c++20\"])"
#endif

#include <atomic>
#include <chrono>
#include <coroutine>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "troupe/api.h"

namespace troupe {

template <typename T = void>
class Async;

namespace internal {

// What Async<T> and Async<void> promises share: the coroutine starts at once (a call runs until
// its first real wait), and at its end resumes whoever awaited it or tells the runtime.
struct AsyncPromiseBase {
  std::coroutine_handle<> continuation;  // a coroutine that co_awaits this one
  std::function<void()> on_done;         // the runtime's completion (a method's own Async)
  std::exception_ptr error;

  std::suspend_never initial_suspend() noexcept { return {}; }
  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <typename Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> self) noexcept {
      auto& promise = self.promise();
      if (promise.continuation) return promise.continuation;
      if (promise.on_done) {
        // Moved out first: it may destroy this frame (and its promise) before it returns.
        std::function<void()> done = std::move(promise.on_done);
        done();
      }
      return std::noop_coroutine();
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { error = std::current_exception(); }
};

template <typename T>
struct AsyncPromise : AsyncPromiseBase {
  std::optional<T> value;
  template <typename U = T>
  void return_value(U&& result) {
    value.emplace(std::forward<U>(result));
  }
  T Take() {
    if (error) std::rethrow_exception(error);
    return std::move(*value);
  }
};

template <>
struct AsyncPromise<void> : AsyncPromiseBase {
  void return_void() noexcept {}
  void Take() {
    if (error) std::rethrow_exception(error);
  }
};

// The running async call, or a TroupeError saying where co_await works.
inline std::shared_ptr<AsyncCall> RequireAsyncCall(const char* what) {
  std::shared_ptr<AsyncCall> call = RequireRuntime().CurrentAsyncCall();
  if (call == nullptr) {
    throw TroupeError(std::string("troupe: co_await ") + what +
                      " works only inside an async actor's method (one returning "
                      "troupe::Async<T>), on the actor's event loop");
  }
  return call;
}

// One wait of a coroutine on the loop: resumed once, by whichever comes first of the thing it
// waits for (`Fire`) and a cancel of its call.
class LoopWait {
 public:
  // Call in await_suspend; `arm` receives the function that resumes the coroutine.
  template <typename Arm>
  void Suspend(const char* what, std::coroutine_handle<> awaiting, Arm&& arm) {
    call_ = RequireAsyncCall(what);
    auto state = state_;
    std::shared_ptr<AsyncCall> call = call_;
    call_->OnCancel([state, call, awaiting] {
      if (state->fired.exchange(true)) return;
      state->cancelled.store(true);
      call->Post([awaiting] { awaiting.resume(); });
    });
    arm([state, call, awaiting] {
      if (state->fired.exchange(true)) return;
      call->Post([awaiting] { awaiting.resume(); });
    });
  }
  // Call first in await_resume: throws TaskCancelledError if the call was cancelled meanwhile.
  void Resumed() {
    call_->OnCancel(nullptr);
    if (state_->cancelled.load()) {
      throw TaskCancelledError("troupe: this call was cancelled (troupe::Cancel) while it waited");
    }
  }
  const std::shared_ptr<AsyncCall>& call() const { return call_; }

 private:
  struct State {
    std::atomic<bool> fired{false};
    std::atomic<bool> cancelled{false};
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::shared_ptr<AsyncCall> call_;
};

template <typename T>
class ObjectRefAwaiter {
 public:
  explicit ObjectRefAwaiter(ObjectRef<T> ref) : ref_(std::move(ref)) {}
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> awaiting) {
    wait_.Suspend("on an ObjectRef", awaiting, [this](std::function<void()> resume) {
      RequireRuntime().NotifyWhenReady(ref_.info(), std::move(resume));
    });
  }
  T await_resume() {
    wait_.Resumed();
    // Ready: this read does not wait (a large object on another node is fetched first).
    if constexpr (std::is_void_v<T>) {
      troupe::Get(ref_);
    } else {
      return *troupe::Get(ref_);
    }
  }

 private:
  ObjectRef<T> ref_;
  LoopWait wait_;
};

class SleepAwaiter {
 public:
  explicit SleepAwaiter(int64_t micros) : micros_(micros) {}
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> awaiting) {
    wait_.Suspend("on troupe::SleepFor", awaiting, [this](std::function<void()> resume) {
      wait_.call()->PostAfter(micros_, std::move(resume));
    });
  }
  void await_resume() { wait_.Resumed(); }

 private:
  int64_t micros_;
  LoopWait wait_;
};

// troupe::Async<T> as a method's return type: the runtime starts the coroutine in the call and,
// if it suspends, completes the call when it ends (function_registry.h).
template <typename T>
struct AsyncTraits<Async<T>> {
  static constexpr bool kIsAsync = true;
  using Value = T;

  static InvokeResult Start(Async<T> task) {
    auto state = std::make_shared<Async<T>>(std::move(task));
    if (state->handle_.done()) return Finished(*state);  // throws what the method threw
    InvokeResult pending;
    pending.then = [state](InvokeResult::Completion done) {
      state->handle_.promise().on_done = [state, done = std::move(done)] {
        InvokeResult result;
        std::exception_ptr error;
        try {
          result = Finished(*state);
        } catch (...) {
          error = std::current_exception();
        }
        done(std::move(result), error);
      };
    };
    return pending;
  }

 private:
  static InvokeResult Finished(Async<T>& task) {
    return RunAndSerialize<T>([&]() -> T { return task.handle_.promise().Take(); },
                              /*num_returns=*/1);
  }
};

}  // namespace internal

// The return type of an async actor method: troupe::Async<int> F(...) { ... co_return 1; }.
// The caller's ObjectRef holds a T (ObjectRef<int>). Inside an async method, `co_await` on an
// Async<T> (a helper coroutine of the actor) gives its T or throws what it threw.
template <typename T>
class [[nodiscard]] Async {
 public:
  struct promise_type : internal::AsyncPromise<T> {
    Async get_return_object() {
      return Async(std::coroutine_handle<promise_type>::from_promise(*this));
    }
  };

  Async(Async&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Async& operator=(Async&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Async(const Async&) = delete;
  Async& operator=(const Async&) = delete;
  ~Async() {
    if (handle_) handle_.destroy();
  }

  bool await_ready() const noexcept { return handle_.done(); }
  void await_suspend(std::coroutine_handle<> awaiting) noexcept {
    handle_.promise().continuation = awaiting;
  }
  T await_resume() { return handle_.promise().Take(); }

 private:
  friend struct internal::AsyncTraits<Async<T>>;
  explicit Async(std::coroutine_handle<promise_type> handle) : handle_(handle) {}
  std::coroutine_handle<promise_type> handle_;
};

// co_await ref: the value of a task's or actor call's result (or any ObjectRef) once ready,
// without blocking the actor's loop; throws the object's error as troupe::Get does.
template <typename T>
internal::ObjectRefAwaiter<T> operator co_await(ObjectRef<T> ref) {
  return internal::ObjectRefAwaiter<T>(std::move(ref));
}

// co_await troupe::SleepFor(10ms): resumes on the loop after the time; other calls run meanwhile.
template <typename Rep, typename Period>
internal::SleepAwaiter SleepFor(std::chrono::duration<Rep, Period> duration) {
  return internal::SleepAwaiter(
      std::chrono::duration_cast<std::chrono::microseconds>(duration).count());
}

}  // namespace troupe
