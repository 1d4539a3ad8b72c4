// Remote functions by name. TROUPE_REMOTE(f, g, &C::m) registers functions (and member
// functions, for actors) under their spelled names at static-initialization time, in every
// process running this executable — the driver and its workers alike — so a task names its
// function by string and the worker finds the same code. The registry is process-wide by
// necessity (registration happens before main); it is filled before main and read-only after.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include "troupe/serialization.h"
#include "troupe/stream.h"

namespace troupe {
namespace internal {

// What running a function produced: the serialized result (`value`; or, for a call asking for
// num_returns > 1, `parts`: one per element of the returned std::tuple, each its own object),
// and what keeps their bytes alive.
struct InvokeResult {
  SerializedValue value;
  std::vector<SerializedValue> parts;
  std::shared_ptr<void> keep_alive;
  // Set when the result comes later (an async actor's method, suspended in a co_await): takes,
  // once, what to call with the final result or the exception the method ended with; that is
  // called once, on the actor's event loop thread.
  using Completion = std::function<void(InvokeResult result, std::exception_ptr error)>;
  std::function<void(Completion)> then;
};

// Return types that complete later. troupe/async.h (C++20) specializes it for troupe::Async<T>:
// kIsAsync, Value (T: what the caller's ObjectRef holds) and Start(), which turns a started
// coroutine into an InvokeResult (with `then` while it is suspended). This header stays C++17.
template <typename R>
struct AsyncTraits {
  static constexpr bool kIsAsync = false;
  using Value = R;
};

// Whether no parameter is a reference: an async method's parameters live in its coroutine
// frame, past the call that decoded them.
template <typename Params>
struct NoReferenceParams;
template <typename... P>
struct NoReferenceParams<std::tuple<P...>> : std::bool_constant<(!std::is_reference_v<P> && ...)> {
};

// `num_returns`: how many objects the caller asked for (TaskCaller::SetNumReturns); 1: the
// whole result as one object.
using FunctionInvoker =
    std::function<InvokeResult(const std::vector<Buffer>& args, int num_returns)>;
// Runs an actor factory (a function returning T*); the instance is owned by the result.
using CreatorInvoker = std::function<std::shared_ptr<void>(const std::vector<Buffer>& args)>;
using MethodInvoker =
    std::function<InvokeResult(void* instance, const std::vector<Buffer>& args, int num_returns)>;

template <typename T>
struct IsTuple : std::false_type {};
template <typename... T>
struct IsTuple<std::tuple<T...>> : std::true_type {};

// The parameters a caller passes. ArgsTuple: the values a call decodes its arguments into (one
// per parameter, decayed: every parameter gets its own copy, as in Ray); Params: the parameters
// as declared. A generator's leading StreamWriter<T>& is the runtime's to give: not among them
// (kIsGenerator, Yields = T).
template <typename... Args>
struct CallSignature {
  using ArgsTuple = std::tuple<std::decay_t<Args>...>;
  using Params = std::tuple<Args...>;
  static constexpr size_t kArity = sizeof...(Args);
  static constexpr bool kIsGenerator = false;
  using Yields = void;
};
template <typename T, typename... Rest>
struct CallSignature<StreamWriter<T>&, Rest...> : CallSignature<Rest...> {
  static constexpr bool kIsGenerator = true;
  using Yields = T;
};

template <typename F>
struct FunctionTraits;
template <typename R, typename... Args>
struct FunctionTraits<R (*)(Args...)> : CallSignature<Args...> {
  using Return = R;
  static constexpr bool kIsMember = false;
};
template <typename R, typename C, typename... Args>
struct FunctionTraits<R (C::*)(Args...)> : CallSignature<Args...> {
  using Return = R;
  using Class = C;
  static constexpr bool kIsMember = true;
};
template <typename R, typename C, typename... Args>
struct FunctionTraits<R (C::*)(Args...) const> : FunctionTraits<R (C::*)(Args...)> {};

[[noreturn]] void ThrowArityError(size_t expected, size_t got);
// A call asked for `num_returns` objects from a function whose result is not a std::tuple of
// that many values (a caller and worker built from different code).
[[noreturn]] void ThrowNumReturnsError(int num_returns, size_t tuple_size);

template <typename Tuple, size_t... I>
Tuple DecodeArgs(const std::vector<Buffer>& args, std::index_sequence<I...>) {
  return Tuple(std::move(*Deserialize<std::tuple_element_t<I, Tuple>>(args[I]))...);
}

// A decoded argument as parameter type P takes it: an lvalue for `T&` and `const T&` (the callee
// may modify its own copy), an rvalue for `T` and `T&&`.
template <typename P, typename T>
decltype(auto) PassAs(T& value) {
  if constexpr (std::is_lvalue_reference_v<P>) {
    return (value);
  } else {
    return std::move(value);
  }
}

// Calls `call` with the decoded arguments, each passed as its declared parameter takes it.
template <typename Params, typename Call, typename Tuple, size_t... I>
decltype(auto) CallWithDecoded(Call&& call, Tuple& decoded, std::index_sequence<I...>) {
  return call(PassAs<std::tuple_element_t<I, Params>>(std::get<I>(decoded))...);
}

template <typename Tuple, size_t... I>
std::vector<SerializedValue> SerializeElements(const Tuple& value, std::index_sequence<I...>) {
  std::vector<SerializedValue> parts;
  parts.reserve(sizeof...(I));
  (parts.push_back(Serialize(std::get<I>(value))), ...);
  return parts;
}

template <typename R, typename Call>
InvokeResult RunAndSerialize(Call&& call, int num_returns) {
  InvokeResult result;
  if constexpr (AsyncTraits<std::decay_t<R>>::kIsAsync) {
    // An async method's result is one object (its coroutine's value).
    if (num_returns > 1) ThrowNumReturnsError(num_returns, 0);
    return AsyncTraits<std::decay_t<R>>::Start(call());
  } else if constexpr (std::is_void_v<R>) {
    if (num_returns > 1) ThrowNumReturnsError(num_returns, 0);
    call();
    result.value = Serialize(msgpack::type::nil_t());
  } else {
    using Value = std::decay_t<R>;
    auto value = std::make_shared<Value>(call());
    result.keep_alive = value;
    if (num_returns <= 1) {
      result.value = Serialize(*value);
    } else if constexpr (IsTuple<Value>::value) {
      constexpr size_t kSize = std::tuple_size_v<Value>;
      if (static_cast<size_t>(num_returns) != kSize) ThrowNumReturnsError(num_returns, kSize);
      result.parts = SerializeElements(*value, std::make_index_sequence<kSize>());
    } else {
      ThrowNumReturnsError(num_returns, 0);
    }
  }
  return result;
}

// Calls `call(args...)`, or for a generator `call(writer, args...)` with a fresh StreamWriter
// (the generator's result is nil: its values went out through the writer).
template <typename Traits, typename Call>
InvokeResult InvokeDecoded(Call&& call, const std::vector<Buffer>& args, int num_returns) {
  if (args.size() != Traits::kArity) ThrowArityError(Traits::kArity, args.size());
  auto decoded =
      DecodeArgs<typename Traits::ArgsTuple>(args, std::make_index_sequence<Traits::kArity>());
  if constexpr (Traits::kIsGenerator) {
    static_assert(std::is_void_v<typename Traits::Return>,
                  "troupe: a streaming generator (first parameter StreamWriter<T>&) returns "
                  "void: it yields its values through the writer");
    StreamWriter<typename Traits::Yields> writer;
    return RunAndSerialize<void>(
        [&] {
          CallWithDecoded<typename Traits::Params>(
              [&](auto&&... a) { call(writer, std::forward<decltype(a)>(a)...); }, decoded,
              std::make_index_sequence<Traits::kArity>());
        },
        num_returns);
  } else {
    return RunAndSerialize<typename Traits::Return>(
        [&]() -> decltype(auto) {
          return CallWithDecoded<typename Traits::Params>(
              call, decoded, std::make_index_sequence<Traits::kArity>());
        },
        num_returns);
  }
}

template <typename F>
FunctionInvoker MakeFunctionInvoker(F f) {
  using Traits = FunctionTraits<F>;
  return [f](const std::vector<Buffer>& args, int num_returns) {
    return InvokeDecoded<Traits>(
        [&](auto&&... a) -> decltype(auto) { return f(std::forward<decltype(a)>(a)...); }, args,
        num_returns);
  };
}

template <typename F>
CreatorInvoker MakeCreatorInvoker(F f) {
  using Traits = FunctionTraits<F>;
  using Class = std::remove_pointer_t<typename Traits::Return>;
  return [f](const std::vector<Buffer>& args) -> std::shared_ptr<void> {
    if (args.size() != Traits::kArity) ThrowArityError(Traits::kArity, args.size());
    auto decoded =
        DecodeArgs<typename Traits::ArgsTuple>(args, std::make_index_sequence<Traits::kArity>());
    Class* instance = CallWithDecoded<typename Traits::Params>(
        f, decoded, std::make_index_sequence<Traits::kArity>());
    return std::shared_ptr<void>(instance, [](void* p) { delete static_cast<Class*>(p); });
  };
}

template <typename F>
MethodInvoker MakeMethodInvoker(F f) {
  using Traits = FunctionTraits<F>;
  return [f](void* instance, const std::vector<Buffer>& args, int num_returns) {
    auto* self = static_cast<typename Traits::Class*>(instance);
    return InvokeDecoded<Traits>(
        [&](auto&&... a) -> decltype(auto) { return (self->*f)(std::forward<decltype(a)>(a)...); },
        args, num_returns);
  };
}

// Function pointers and member-function pointers as map keys: their bytes.
template <typename F>
std::string PointerKey(F f) {
  return std::string(reinterpret_cast<const char*>(&f), sizeof(F));
}

class FunctionRegistry {
 public:
  static FunctionRegistry& Instance();

  template <typename F>
  void Register(const std::string& name, F f) {
    static_assert(std::is_pointer_v<F> || std::is_member_function_pointer_v<F>,
                  "TROUPE_REMOTE takes functions, static member functions and member functions");
    using Return = std::decay_t<typename FunctionTraits<F>::Return>;
    if constexpr (FunctionTraits<F>::kIsMember) {
      if constexpr (AsyncTraits<Return>::kIsAsync) {
        static_assert(NoReferenceParams<typename FunctionTraits<F>::Params>::value,
                      "troupe: an async method (returning troupe::Async) takes its parameters by "
                      "value: a reference would dangle once the coroutine suspends");
        async_classes_.push_back(typeid(typename FunctionTraits<F>::Class).name());
      }
      methods_[name] = MakeMethodInvoker(f);
    } else if constexpr (std::is_pointer_v<typename FunctionTraits<F>::Return>) {
      creators_[name] = MakeCreatorInvoker(f);  // a factory: T* Create(...)
    } else {
      static_assert(!AsyncTraits<Return>::kIsAsync,
                    "troupe: troupe::Async is the return type of actor methods (an async actor); "
                    "a task returns its value");
      functions_[name] = MakeFunctionInvoker(f);
    }
    names_[PointerKey(f)] = name;
  }
  // Assigns calls of actor method `f` to a concurrency group (TROUPE_CONCURRENCY_GROUP).
  template <typename F>
  void SetConcurrencyGroup(F f, const std::string& group) {
    static_assert(std::is_member_function_pointer_v<F>,
                  "TROUPE_CONCURRENCY_GROUP takes actor methods: &Class::Method");
    groups_[PointerKey(f)] = group;
  }
  // The group calls of `f` run in unless a call says otherwise ("": the default group).
  template <typename F>
  const std::string& ConcurrencyGroupOf(F f) const {
    static const std::string kDefault;
    auto it = groups_.find(PointerKey(f));
    return it == groups_.end() ? kDefault : it->second;
  }
  // Whether a method of the class (typeid(Class).name()) returns troupe::Async: its actors are
  // async actors.
  bool IsAsyncClass(const char* type_name) const {
    for (const std::string& name : async_classes_) {
      if (name == type_name) return true;
    }
    return false;
  }
  // nullptr if no function of that name is registered.
  const FunctionInvoker* FindFunction(const std::string& name) const;
  const MethodInvoker* FindMethod(const std::string& name) const;
  const CreatorInvoker* FindCreator(const std::string& name) const;
  // The registered name of `f`; throws TroupeError naming the fix if it was never registered.
  template <typename F>
  const std::string& NameOf(F f) const {
    auto it = names_.find(PointerKey(f));
    if (it == names_.end()) ThrowNotRegistered();
    return it->second;
  }

 private:
  [[noreturn]] static void ThrowNotRegistered();
  std::unordered_map<std::string, FunctionInvoker> functions_;
  std::unordered_map<std::string, MethodInvoker> methods_;
  std::unordered_map<std::string, CreatorInvoker> creators_;
  std::unordered_map<std::string, std::string> names_;
  std::unordered_map<std::string, std::string> groups_;  // method pointer key -> group
  std::vector<std::string> async_classes_;
};

// Splits "f, ns::g, TROUPE_FUNC(h, int, int)" at top-level commas, trimming spaces.
std::vector<std::string> SplitFunctionNames(const std::string& text);

template <typename... Fs>
bool RegisterRemote(const char* names_text, Fs... fs) {
  std::vector<std::string> names = SplitFunctionNames(names_text);
  size_t i = 0;
  (FunctionRegistry::Instance().Register(names.at(i++), fs), ...);
  return true;
}

template <typename F>
bool AssignConcurrencyGroup(const char* group, F f) {
  FunctionRegistry::Instance().SetConcurrencyGroup(f, group);
  return true;
}

// Picks one overload of a function by its parameter types: TROUPE_FUNC(f, int, double).
template <typename... Args>
struct OverloadSelector {
  template <typename R>
  constexpr auto operator()(R (*f)(Args...)) const {
    return f;
  }
  template <typename R, typename C>
  constexpr auto operator()(R (C::*f)(Args...)) const {
    return f;
  }
};

}  // namespace internal
}  // namespace troupe

#define TROUPE_INTERNAL_CONCAT2(a, b) a##b
#define TROUPE_INTERNAL_CONCAT(a, b) TROUPE_INTERNAL_CONCAT2(a, b)

// Registers remote functions: TROUPE_REMOTE(Plus, Counter::Create, &Counter::Add);
// Use at namespace scope in a .cc file of the executable.
#define TROUPE_REMOTE(...)                                                           \
  static const bool TROUPE_INTERNAL_CONCAT(troupe_remote_registered_, __COUNTER__) = \
      ::troupe::internal::RegisterRemote(#__VA_ARGS__, __VA_ARGS__)

// Calls of an actor method run in a concurrency group unless the call names another
// (ActorTaskCaller::SetConcurrencyGroup): TROUPE_CONCURRENCY_GROUP(&Store::Load, "io");
#define TROUPE_CONCURRENCY_GROUP(method, group)                                   \
  static const bool TROUPE_INTERNAL_CONCAT(troupe_group_assigned_, __COUNTER__) = \
      ::troupe::internal::AssignConcurrencyGroup(group, method)

// Selects one overload: TROUPE_FUNC(Overloaded, int, int).
#define TROUPE_FUNC(f, ...) (::troupe::internal::OverloadSelector<__VA_ARGS__>()(f))
