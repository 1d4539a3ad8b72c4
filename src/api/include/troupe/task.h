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

template <typename ArgsTuple, typename... A, size_t... I>
std::vector<TaskArgument> MakeArguments(std::index_sequence<I...>, A&&... args) {
  std::vector<TaskArgument> out;
  out.reserve(sizeof...(A));
  (out.push_back(MakeArgument<std::tuple_element_t<I, ArgsTuple>>(std::forward<A>(args))), ...);
  return out;
}

}  // namespace internal

template <typename F>
class TaskCaller {
 public:
  using Traits = internal::FunctionTraits<F>;
  using Return = std::decay_t<typename Traits::Return>;

  explicit TaskCaller(F f) : f_(f) {}

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
  ObjectRef<Return> Remote(A&&... args) {
    static_assert(!Traits::kIsMember, "use an actor handle's Task() for member functions");
    static_assert(sizeof...(A) == Traits::kArity,
                  "troupe: Remote() got a different number of arguments than the function takes");
    internal::Runtime* runtime = internal::CurrentRuntime();
    if (runtime == nullptr) internal::ThrowNotInitialized();
    const std::string& name = internal::FunctionRegistry::Instance().NameOf(f_);
    auto arguments = internal::MakeArguments<typename Traits::ArgsTuple>(
        std::index_sequence_for<A...>(), std::forward<A>(args)...);
    internal::RefInfo ref = runtime->SubmitTask(name, std::move(arguments), options_);
    // SubmitTask returned with one reference already held for us.
    ObjectRef<Return> result(ref);
    runtime->RemoveLocalRef(ref.object_id);
    return result;
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
