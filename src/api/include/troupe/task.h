// troupe::Task(f).Set...().Remote(args...): submits a call of a registered function to run
// somewhere in the cluster and returns an ObjectRef to its result.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "troupe/function_registry.h"
#include "troupe/label_selector.h"
#include "troupe/object_ref.h"
#include "troupe/placement_group.h"
#include "troupe/runtime.h"
#include "troupe/stream.h"

namespace troupe {

// Scheduling strategies: the default packs a node up to ~50% utilisation, then spreads.
struct Spread {};
struct NodeAffinity {
  std::string node_id;  // hex, as `troupe status` prints it
  bool soft = false;    // run elsewhere if that node cannot
};

namespace internal {

[[noreturn]] void ThrowNotInitialized();

template <typename T>
struct IsObjectRef : std::false_type {};
template <typename T>
struct IsObjectRef<ObjectRef<T>> : std::true_type {};

// One argument for parameter type P (decayed) from a caller's value of type A.
template <typename P, typename A>
TaskArgument MakeArgument(A&& arg) {
  using Passed = std::decay_t<A>;
  TaskArgument out;
  if constexpr (IsObjectRef<Passed>::value && !IsObjectRef<P>::value) {
    static_assert(std::is_convertible_v<typename Passed::ValueType, P>,
                  "troupe: an ObjectRef<T> argument must hold the parameter's type");
    out.by_reference = true;
    out.ref = arg.info();
  } else {
    static_assert(std::is_constructible_v<P, A&&>,
                  "troupe: an argument does not convert to the function's parameter type");
    SerializedValue serialized;
    if constexpr (std::is_same_v<Passed, P>) {
      serialized = Serialize(arg);
      out.value = serialized.ToString();
    } else {
      P converted(std::forward<A>(arg));
      serialized = Serialize(converted);
      out.value = serialized.ToString();
    }
    out.contained = std::move(serialized.contained_refs);
  }
  return out;
}

// What Remote() returns for a call of a function returning R: one ObjectRef<R> (kNumReturns 0,
// the plain call), or, split into its elements, a std::tuple<ObjectRef<A>, ObjectRef<B>, ...>
// for R = std::tuple<A, B, ...> (SetNumReturns<N>, N == the tuple's size: checked at compile
// time).
template <typename R, size_t kNumReturns>
struct RemoteResult {
  using Type = ObjectRef<R>;
};
template <typename... T, size_t kNumReturns>
struct RemoteResult<std::tuple<T...>, kNumReturns> {
  using Type = std::conditional_t<kNumReturns == 0, ObjectRef<std::tuple<T...>>,
                                  std::tuple<ObjectRef<T>...>>;
};

template <typename R, size_t kNumReturns>
constexpr void CheckNumReturns() {
  if constexpr (kNumReturns != 0) {
    static_assert(IsTuple<R>::value,
                  "troupe: SetNumReturns<N>() needs a function returning std::tuple<...> (one "
                  "ObjectRef per element)");
    if constexpr (IsTuple<R>::value) {
      static_assert(std::tuple_size_v<R> == kNumReturns,
                    "troupe: SetNumReturns<N>(): N must be the number of elements of the "
                    "std::tuple the function returns");
    }
  }
}

// Wraps the references SubmitTask returned (each with one local reference held for us) into
// what Remote() returns, and lets go of those held references.
template <typename R, size_t kNumReturns, size_t... I>
typename RemoteResult<R, kNumReturns>::Type WrapReturns(Runtime* runtime,
                                                        const std::vector<RefInfo>& refs,
                                                        std::index_sequence<I...>) {
  using Result = typename RemoteResult<R, kNumReturns>::Type;
  Result result = [&] {
    if constexpr (kNumReturns == 0) {
      return Result(refs.at(0));
    } else {
      return Result(std::tuple_element_t<I, Result>(refs.at(I))...);
    }
  }();
  for (const RefInfo& ref : refs) runtime->RemoveLocalRef(ref.object_id);
  return result;
}

template <typename R, size_t kNumReturns>
typename RemoteResult<R, kNumReturns>::Type WrapReturns(Runtime* runtime,
                                                        const std::vector<RefInfo>& refs) {
  constexpr size_t kCount = kNumReturns == 0 ? 1 : kNumReturns;
  return WrapReturns<R, kNumReturns>(runtime, refs, std::make_index_sequence<kCount>());
}

// What a call's ObjectRef holds: the function's return type (T for an async method's
// troupe::Async<T>).
template <typename Traits>
using CallerValue =
    std::decay_t<typename AsyncTraits<std::decay_t<typename Traits::Return>>::Value>;

// Remote()'s result for a call of a function with traits `Traits`: a generator's stream, or
// RemoteResult.
template <typename Traits, size_t kNumReturns>
using RemoteReturn =
    std::conditional_t<Traits::kIsGenerator, ObjectRefStream<typename Traits::Yields>,
                       typename RemoteResult<CallerValue<Traits>, kNumReturns>::Type>;

// Remote()'s result from the references SubmitTask returned (each with one local reference
// held for us, let go here).
template <typename Traits, size_t kNumReturns>
RemoteReturn<Traits, kNumReturns> MakeRemoteReturn(Runtime* runtime,
                                                   const std::vector<RefInfo>& refs) {
  if constexpr (Traits::kIsGenerator) {
    ObjectRefStream<typename Traits::Yields> stream(refs.at(0));
    runtime->RemoveLocalRef(refs.at(0).object_id);
    return stream;
  } else {
    return WrapReturns<CallerValue<Traits>, kNumReturns>(runtime, refs);
  }
}

template <typename ArgsTuple, typename... A, size_t... I>
std::vector<TaskArgument> MakeArguments(std::index_sequence<I...>, A&&... args) {
  std::vector<TaskArgument> out;
  out.reserve(sizeof...(A));
  (out.push_back(MakeArgument<std::tuple_element_t<I, ArgsTuple>>(std::forward<A>(args))), ...);
  return out;
}

}  // namespace internal

// kNumReturns: 0 for the plain call (one ObjectRef to the whole result); N after
// SetNumReturns<N>() (one ObjectRef per element of the returned std::tuple).
template <typename F, size_t kNumReturns = 0>
class TaskCaller {
 public:
  using Traits = internal::FunctionTraits<F>;
  using Return = std::decay_t<typename Traits::Return>;

  explicit TaskCaller(F f, internal::TaskOptions options = {})
      : f_(f), options_(std::move(options)) {}

  // For a function returning std::tuple<A, B, ...>: Remote() gives one ObjectRef per element,
  // std::tuple<ObjectRef<A>, ObjectRef<B>, ...> (so `auto [a, b] = ...Remote(...)`), each its
  // own object: freed when its last reference goes, rebuilt on its own when lost. N must be
  // the tuple's size (checked at compile time).
  // For a streaming generator: at most `n` items produced and not read yet; its Yield blocks
  // beyond that until the reader catches up. Default 0: no bound (as Ray's default).
  TaskCaller& SetStreamBackpressure(int64_t n) {
    static_assert(Traits::kIsGenerator,
                  "troupe: SetStreamBackpressure applies to streaming generators (functions "
                  "whose first parameter is troupe::StreamWriter<T>&)");
    options_.stream_backpressure = n < 0 ? 0 : n;
    return *this;
  }

  template <size_t N>
  TaskCaller<F, N> SetNumReturns() const {
    static_assert(!Traits::kIsGenerator,
                  "troupe: a streaming generator gives a stream, not several returns");
    static_assert(N >= 1, "troupe: SetNumReturns<N>() needs N >= 1");
    internal::CheckNumReturns<Return, N>();
    internal::TaskOptions options = options_;
    options.num_returns = static_cast<int>(N);
    return TaskCaller<F, N>(f_, std::move(options));
  }

  TaskCaller& SetName(std::string name) {
    options_.name = std::move(name);
    return *this;
  }
  // Resources one run needs, e.g. {{"CPU", 1}, {"GPU", 0.5}, {"my_resource", 2}}. Default: 1 CPU.
  TaskCaller& SetResources(std::map<std::string, double> resources) {
    options_.resources = std::move(resources);
    return *this;
  }
  // Reruns after a worker or node dies mid-task (default 3).
  TaskCaller& SetMaxRetries(int max_retries) {
    options_.max_retries = max_retries;
    return *this;
  }
  // Also rerun when the function throws (default: an exception is final).
  TaskCaller& SetRetryExceptions(bool retry) {
    options_.retry_exceptions = retry;
    return *this;
  }
  // Run inside a bundle of the group (-1: any bundle).
  TaskCaller& SetPlacementGroup(const PlacementGroup& group, int bundle_index = -1) {
    options_.placement_group_id = group.binary_id();
    options_.bundle_index = bundle_index;
    return *this;
  }
  TaskCaller& SetSchedulingStrategy(Spread) {
    options_.strategy = {internal::SchedulingStrategy::Kind::kSpread, "", false};
    return *this;
  }
  TaskCaller& SetSchedulingStrategy(NodeAffinity affinity) {
    options_.strategy = {internal::SchedulingStrategy::Kind::kNodeAffinity, affinity.node_id,
                         affinity.soft};
    return *this;
  }
  // Only nodes whose labels match (kRequired), or those first (kPreferred); combines with the
  // scheduling strategy and resources (troupe/label_selector.h).
  TaskCaller& SetLabelSelector(const LabelSelector& selector,
                               LabelMatch match = LabelMatch::kRequired) {
    options_.label_selector = selector.constraints();
    options_.label_selector_soft = match == LabelMatch::kPreferred;
    return *this;
  }

  template <typename... A>
  internal::RemoteReturn<Traits, kNumReturns> Remote(A&&... args) {
    static_assert(!Traits::kIsMember, "use an actor handle's Task() for member functions");
    internal::CheckNumReturns<Return, kNumReturns>();
    static_assert(sizeof...(A) == Traits::kArity,
                  "troupe: Remote() got a different number of arguments than the function takes");
    internal::Runtime* runtime = internal::CurrentRuntime();
    if (runtime == nullptr) internal::ThrowNotInitialized();
    const std::string& name = internal::FunctionRegistry::Instance().NameOf(f_);
    auto arguments = internal::MakeArguments<typename Traits::ArgsTuple>(
        std::index_sequence_for<A...>(), std::forward<A>(args)...);
    internal::TaskOptions options = options_;
    options.streaming = Traits::kIsGenerator;
    std::vector<internal::RefInfo> refs = runtime->SubmitTask(name, std::move(arguments), options);
    return internal::MakeRemoteReturn<Traits, kNumReturns>(runtime, refs);
  }

 private:
  F f_;
  internal::TaskOptions options_;
};

template <typename F>
TaskCaller<F> Task(F f) {
  return TaskCaller<F>(f);
}

}  // namespace troupe
