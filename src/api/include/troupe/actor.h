// Actors: stateful workers. troupe::Actor(Factory).Set...().Remote(args...) creates one (the GCS
// places it on a node and keeps it alive: restarts, death causes); handle.Task(&T::Method)
// .Remote(args...) calls it. Calls from one caller run in the order they were made (unless
// max_concurrency > 1). Handles can be copied and sent to tasks and other actors.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "troupe/errors.h"
#include "troupe/function_registry.h"
#include "troupe/object_ref.h"
#include "troupe/runtime.h"
#include "troupe/task.h"

namespace troupe {

template <typename T, typename F, size_t kNumReturns = 0>
class ActorTaskCaller;

template <typename T>
class ActorHandle {
 public:
  ActorHandle() = default;
  explicit ActorHandle(std::string actor_id) : actor_id_(std::move(actor_id)) {}

  // handle.Task(&T::Method).Remote(args...)
  template <typename F>
  ActorTaskCaller<T, F> Task(F method) const {
    return ActorTaskCaller<T, F>(actor_id_, method);
  }
  // Kills the actor; with no_restart = false it restarts if it has restarts left.
  void Kill(bool no_restart = true) const {
    internal::Runtime* runtime = internal::CurrentRuntime();
    if (runtime == nullptr) internal::ThrowNotInitialized();
    runtime->KillActor(actor_id_, no_restart);
  }
  std::string ID() const { return HexOf(actor_id_); }
  const std::string& binary_id() const { return actor_id_; }
  bool IsNil() const { return actor_id_.empty(); }

  template <typename Packer>
  void msgpack_pack(Packer& packer) const {
    packer.pack(actor_id_);
  }
  void msgpack_unpack(const msgpack::object& object) { actor_id_ = object.as<std::string>(); }

 private:
  std::string actor_id_;
};

namespace internal {
template <typename T>
struct IsSerializable<ActorHandle<T>> : std::true_type {};
}  // namespace internal

template <typename T, typename F, size_t kNumReturns>
class ActorTaskCaller {
 public:
  using Traits = internal::FunctionTraits<F>;
  // What the caller's ObjectRef holds: the method's return type (T for troupe::Async<T>).
  using Return =
      std::decay_t<typename internal::AsyncTraits<std::decay_t<typename Traits::Return>>::Value>;

  ActorTaskCaller(std::string actor_id, F method, internal::ActorCallOptions options = {})
      : actor_id_(std::move(actor_id)), method_(method), options_(std::move(options)) {}

  // As TaskCaller::SetNumReturns: a method returning std::tuple<A, B, ...> gives one ObjectRef
  // per element.
  // As TaskCaller::SetStreamBackpressure, for a method that is a streaming generator.
  ActorTaskCaller& SetStreamBackpressure(int64_t n) {
    static_assert(Traits::kIsGenerator,
                  "troupe: SetStreamBackpressure applies to streaming generators (methods whose "
                  "first parameter is troupe::StreamWriter<T>&)");
    options_.stream_backpressure = n < 0 ? 0 : n;
    return *this;
  }

  template <size_t N>
  ActorTaskCaller<T, F, N> SetNumReturns() const {
    static_assert(!Traits::kIsGenerator,
                  "troupe: a streaming generator gives a stream, not several returns");
    static_assert(N >= 1, "troupe: SetNumReturns<N>() needs N >= 1");
    internal::CheckNumReturns<Return, N>();
    internal::ActorCallOptions options = options_;
    options.num_returns = static_cast<int>(N);
    return ActorTaskCaller<T, F, N>(actor_id_, method_, std::move(options));
  }

  // The name this call shows under in `troupe list tasks`, the dashboard and the timeline
  // (default: the method's registered name, e.g. "&Counter::Add").
  ActorTaskCaller& SetName(std::string name) {
    options_.name = std::move(name);
    return *this;
  }
  // Runs this call in one of the actor's concurrency groups (ActorCreator::SetConcurrencyGroups);
  // default: the group TROUPE_CONCURRENCY_GROUP assigned the method, else the default group. A
  // group the actor lacks fails the call with InvalidArgumentError naming it.
  ActorTaskCaller& SetConcurrencyGroup(std::string group) {
    options_.concurrency_group = std::move(group);
    group_set_ = true;
    return *this;
  }

  // Task options that do not apply to an actor call, refused at compile time: the call runs on
  // the actor's own worker, inside what the actor holds, so it needs no resources, placement or
  // scheduling of its own; and a call's retries follow the actor's SetMaxTaskRetries, since
  // rerunning a call on a stateful actor is a decision about the actor, not about one call.
  ActorTaskCaller& SetResources(std::map<std::string, double>) {
    static_assert(internal::kAlwaysFalse<T>,
                  "troupe: an actor call runs with its actor's resources; set them when creating "
                  "the actor: troupe::Actor(Factory).SetResources(...)");
    return *this;
  }
  ActorTaskCaller& SetPlacementGroup(const PlacementGroup&, int = -1) {
    static_assert(internal::kAlwaysFalse<T>,
                  "troupe: an actor call runs where its actor lives; place the actor instead: "
                  "troupe::Actor(Factory).SetPlacementGroup(...)");
    return *this;
  }
  template <typename Strategy>
  ActorTaskCaller& SetSchedulingStrategy(Strategy) {
    static_assert(internal::kAlwaysFalse<Strategy>,
                  "troupe: an actor call runs where its actor lives; schedule the actor instead: "
                  "troupe::Actor(Factory).SetSchedulingStrategy(...)");
    return *this;
  }
  ActorTaskCaller& SetLabelSelector(const LabelSelector&, LabelMatch = LabelMatch::kRequired) {
    static_assert(internal::kAlwaysFalse<T>,
                  "troupe: an actor call runs where its actor lives; select the actor's node "
                  "instead: troupe::Actor(Factory).SetLabelSelector(...)");
    return *this;
  }
  ActorTaskCaller& SetMaxRetries(int) {
    static_assert(internal::kAlwaysFalse<T>,
                  "troupe: actor calls are retried per the actor's policy; set it when creating "
                  "the actor: troupe::Actor(Factory).SetMaxTaskRetries(n)");
    return *this;
  }
  ActorTaskCaller& SetRetryExceptions(bool) {
    static_assert(internal::kAlwaysFalse<T>,
                  "troupe: actor calls are not rerun when the method throws (the actor's state "
                  "may have changed); catch the exception in the method to retry inside it");
    return *this;
  }

  template <typename... A>
  internal::RemoteReturn<Traits, kNumReturns> Remote(A&&... args) {
    static_assert(Traits::kIsMember, "handle.Task() takes a member function: &Class::Method");
    internal::CheckNumReturns<Return, kNumReturns>();
    static_assert(std::is_base_of_v<typename Traits::Class, T>,
                  "the method does not belong to this actor's class");
    static_assert(sizeof...(A) == Traits::kArity,
                  "troupe: Remote() got a different number of arguments than the method takes");
    internal::Runtime* runtime = internal::CurrentRuntime();
    if (runtime == nullptr) internal::ThrowNotInitialized();
    const std::string& name = internal::FunctionRegistry::Instance().NameOf(method_);
    auto arguments = internal::MakeArguments<typename Traits::ArgsTuple>(
        std::index_sequence_for<A...>(), std::forward<A>(args)...);
    internal::ActorCallOptions options = options_;
    if (!group_set_) {
      options.concurrency_group = internal::FunctionRegistry::Instance().ConcurrencyGroupOf(method_);
    }
    options.streaming = Traits::kIsGenerator;
    std::vector<internal::RefInfo> refs =
        runtime->SubmitActorTask(actor_id_, name, std::move(arguments), options);
    return internal::MakeRemoteReturn<Traits, kNumReturns>(runtime, refs);
  }

 private:
  std::string actor_id_;
  F method_;
  internal::ActorCallOptions options_;
  bool group_set_ = false;
};

template <typename F>
class ActorCreator {
 public:
  using Traits = internal::FunctionTraits<F>;
  using Class = std::remove_pointer_t<typename Traits::Return>;
  static_assert(std::is_pointer_v<typename Traits::Return>,
                "troupe::Actor takes a factory returning a new object: static T* Create(...)");

  explicit ActorCreator(F factory) : factory_(factory) {
    options_.class_type_name = typeid(Class).name();
  }

  ActorCreator& SetName(std::string name) {
    options_.name = std::move(name);
    return *this;
  }
  // Get-or-create (Ray's get_if_exists): with SetName, Remote() returns the live actor of that
  // name (in that namespace) if there is one, else creates it; callers racing to create it all
  // get the one actor. Its arguments and options are then those of whoever created it. Remote()
  // throws InvalidArgumentError when no name was set.
  ActorCreator& SetGetIfExists(bool get_if_exists = true) {
    options_.get_if_exists = get_if_exists;
    return *this;
  }
  ActorCreator& SetNamespace(std::string ns) {
    options_.namespace_name = std::move(ns);
    return *this;
  }
  // Held for the actor's whole life, e.g. {{"GPU", 1}}. Default: none.
  ActorCreator& SetResources(std::map<std::string, double> resources) {
    options_.resources = std::move(resources);
    return *this;
  }
  // Restarts after a crash or node death (-1: forever; default 0).
  ActorCreator& SetMaxRestarts(int n) {
    options_.max_restarts = n;
    return *this;
  }
  // Calls in flight when the actor died are resent to the restarted actor this many times
  // (at-least-once, in order); 0 (default): they fail with ActorDiedError (at-most-once).
  ActorCreator& SetMaxTaskRetries(int n) {
    options_.max_task_retries = n;
    return *this;
  }
  // Run up to n calls at once (then calls are not ordered): n threads; for an async actor (one
  // with methods returning troupe::Async) n calls in flight on its one thread (default 1000).
  ActorCreator& SetMaxConcurrency(int n) {
    if (n < 1) {
      throw InvalidArgumentError("troupe::Actor: SetMaxConcurrency(" + std::to_string(n) +
                                 "): the limit must be at least 1");
    }
    options_.max_concurrency = n;
    max_concurrency_set_ = true;
    return *this;
  }
  // Named groups of calls, each with its own limit of calls at once (threads; for an async
  // actor, calls in flight), beside the default group (SetMaxConcurrency). A call runs in the
  // group it names (ActorTaskCaller::SetConcurrencyGroup) or its method was assigned
  // (TROUPE_CONCURRENCY_GROUP), else in the default group: e.g. {{"io", 2}, {"compute", 4}}.
  // Throws InvalidArgumentError for an empty name or a limit below 1.
  ActorCreator& SetConcurrencyGroups(std::map<std::string, int> groups) {
    for (const auto& [name, limit] : groups) {
      if (name.empty()) {
        throw InvalidArgumentError(
            "troupe::Actor: SetConcurrencyGroups: a group has an empty name; name each group "
            "(the default group needs none: its limit is SetMaxConcurrency)");
      }
      if (limit < 1) {
        throw InvalidArgumentError("troupe::Actor: SetConcurrencyGroups: group \"" + name +
                                   "\" has limit " + std::to_string(limit) +
                                   "; give each group a limit of at least 1");
      }
    }
    options_.concurrency_groups = std::move(groups);
    return *this;
  }
  // SetLifetime(Detached{}): the actor outlives the job that created it (until killed).
  ActorCreator& SetLifetime(Detached) {
    options_.detached = true;
    return *this;
  }
  // Live inside a bundle of the group (-1: any bundle).
  ActorCreator& SetPlacementGroup(const PlacementGroup& group, int bundle_index = -1) {
    options_.placement_group_id = group.binary_id();
    options_.bundle_index = bundle_index;
    return *this;
  }
  ActorCreator& SetSchedulingStrategy(Spread) {
    options_.strategy = {internal::SchedulingStrategy::Kind::kSpread, "", false};
    return *this;
  }
  ActorCreator& SetSchedulingStrategy(NodeAffinity affinity) {
    options_.strategy = {internal::SchedulingStrategy::Kind::kNodeAffinity, affinity.node_id,
                         affinity.soft};
    return *this;
  }
  // Only nodes whose labels match (kRequired: no such node kills the actor with the selector and
  // the nodes' labels as its death cause), or those first (kPreferred). troupe/label_selector.h.
  ActorCreator& SetLabelSelector(const LabelSelector& selector,
                                 LabelMatch match = LabelMatch::kRequired) {
    options_.label_selector = selector.constraints();
    options_.label_selector_soft = match == LabelMatch::kPreferred;
    return *this;
  }

  template <typename... A>
  ActorHandle<Class> Remote(A&&... args) {
    static_assert(sizeof...(A) == Traits::kArity,
                  "troupe: Remote() got a different number of arguments than the factory takes");
    internal::Runtime* runtime = internal::CurrentRuntime();
    if (runtime == nullptr) internal::ThrowNotInitialized();
    const auto& registry = internal::FunctionRegistry::Instance();
    const std::string& name = registry.NameOf(factory_);
    auto arguments = internal::MakeArguments<typename Traits::ArgsTuple>(
        std::index_sequence_for<A...>(), std::forward<A>(args)...);
    options_.async_actor = registry.IsAsyncClass(typeid(Class).name());
    if (options_.async_actor && !max_concurrency_set_) {
      options_.max_concurrency = kAsyncMaxConcurrency;
    }
    return ActorHandle<Class>(runtime->CreateActor(name, std::move(arguments), options_));
  }

  // An async actor's default limit of calls in flight (Ray's default for async actors).
  static constexpr int kAsyncMaxConcurrency = 1000;

 private:
  F factory_;
  internal::ActorOptions options_;
  bool max_concurrency_set_ = false;
};

template <typename F>
ActorCreator<F> Actor(F factory) {
  return ActorCreator<F>(factory);
}

// The live actor named `name` in namespace `ns` (default: this job's namespace), if any.
template <typename T>
std::optional<ActorHandle<T>> GetActor(const std::string& name, const std::string& ns = "") {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  std::string id = runtime->GetNamedActor(name, ns);
  if (id.empty()) return std::nullopt;
  return ActorHandle<T>(id);
}

// Inside an actor method: the actor leaves once this call returns, and is not restarted.
inline void ExitActor() {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  runtime->ExitActor();
}

// Inside an actor: whether this instance is a restart (the previous one died).
// The GPUs leased to this worker (the node's GPU indices, from TROUPE_GPU_IDS); empty in a
// driver or a worker without GPUs. With the raylet's default --gpu-visibility=all every GPU of
// the node is visible and these are the CUDA device numbers to use; with =assigned the worker
// sees only these, as devices 0..n-1.
inline std::vector<int> GetGpuIds() {
  std::vector<int> ids;
  const char* env = std::getenv("TROUPE_GPU_IDS");
  for (const char* p = env; p != nullptr && *p != '\0';) {
    char* end = nullptr;
    ids.push_back(static_cast<int>(std::strtol(p, &end, 10)));
    if (end == p) break;
    p = *end == ',' ? end + 1 : end;
  }
  return ids;
}

inline bool WasCurrentActorRestarted() {
  internal::Runtime* runtime = internal::CurrentRuntime();
  return runtime != nullptr && runtime->WasCurrentActorRestarted();
}

}  // namespace troupe
