// Ray's C++ API side of the task/object microbenchmarks (bench/task_bench.cc is Troupe's side,
// bench/ray_microbench.py Ray's Python side): the same workloads with Ray's metric names, written
// against <ray/api.h> from the `ray-cpp` wheel. Prints one JSON object per line,
// {"metric": ..., "value": ..., "unit": ...}; a workload Ray's C++ API cannot express prints
// {"metric": ..., "value": null, "unit": ..., "unsupported": "<why>"} instead.
//
// Not a Bazel target: bench/ray_cpp_bench.sh builds it with g++ against the wheel (the executable
// and the same code as ray_cpp_bench.so, which Ray's C++ workers load from the code search path)
// and runs it against a `ray start --head --num-cpus=2` cluster it starts and stops itself.
//   ray_cpp_bench --address=IP:PORT [--seconds=2] [--only=a,b] [--code_search_path=X.so]
// ObjectRefs are stored by assignment into a sized vector, never moved into place
// (push_back(Remote())): Ray's ObjectRef move constructor drops the reference before taking it
// again, so a ref whose count falls to zero is released and a ray::Get of it can wait forever
// (seen with Ray 2.60.0 in the n:n workload: a client's Get of its actor calls never returned).
// The driver never starts a cluster itself: Ray's C++ driver would stop one it started with
// `ray stop`, which kills every Ray process on the machine.
#include <ray/api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_util.h"

namespace {

int SmallValue() { return 0; }

// A task acting as one of several clients, each submitting `n` tasks and waiting for them.
int SubmitMany(int n) {
  std::vector<ray::ObjectRef<int>> refs(n);
  for (int i = 0; i < n; ++i) refs[i] = ray::Task(SmallValue).Remote();
  ray::Get(refs);
  return n;
}

class Echo {
 public:
  static Echo* Create() { return new Echo(); }
  int Small() { return 0; }
  int SmallWithArg(int x) { return x; }
};

// A client task calling its own actor `n` times (optionally with an object argument).
int CallActor(ray::ActorHandle<Echo> actor, int n, bool with_arg) {
  std::vector<ray::ObjectRef<int>> refs(n);
  auto arg = ray::Put(1);
  for (int i = 0; i < n; ++i) {
    refs[i] =
        with_arg ? actor.Task(&Echo::SmallWithArg).Remote(arg) : actor.Task(&Echo::Small).Remote();
  }
  ray::Get(refs);
  return n;
}

RAY_REMOTE(SmallValue, SubmitMany, Echo::Create, &Echo::Small, &Echo::SmallWithArg, CallActor);

void Report(const char* metric, double value, const char* unit) {
  troupe::bench::Report(metric, value, unit);
}

// A metric of the Troupe/Ray-Python programs that Ray's C++ API cannot express.
void Unsupported(const char* metric, const char* unit, const char* why) {
  std::printf("{\"metric\": \"%s\", \"value\": null, \"unit\": \"%s\", \"unsupported\": \"%s\"}\n",
              metric, unit, why);
  std::fflush(stdout);
}

// ray_cpp_bench.so beside this executable: the code Ray's C++ workers load.
std::string DefaultCodeSearchPath() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  return std::string(self, n) + ".so";
}

std::vector<std::string> Split(const std::string& list) {
  std::vector<std::string> parts;
  std::stringstream in(list);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

int Run(int argc, char** argv) {
  using troupe::bench::FlagValue;
  const double seconds = std::atof(FlagValue(argc, argv, "seconds", "2").c_str());
  const std::vector<std::string> only = Split(FlagValue(argc, argv, "only", ""));
  auto wanted = [&](std::initializer_list<const char*> metrics) {
    if (only.empty()) return true;
    for (const char* metric : metrics) {
      if (std::find(only.begin(), only.end(), metric) != only.end()) return true;
    }
    return false;
  };
  auto Rate = [](int ops_per_batch, double secs, const std::function<void()>& batch) {
    return troupe::bench::Rate(ops_per_batch, secs, batch);
  };

  ray::RayConfig config;
  const char* env_address = std::getenv("RAY_ADDRESS");
  config.address = FlagValue(argc, argv, "address", env_address ? env_address : "");
  if (config.address.empty()) {
    std::fprintf(stderr,
                 "ray_cpp_bench: no cluster address. Pass --address=IP:PORT of a running "
                 "`ray start --head` (or set RAY_ADDRESS), or run it through "
                 "`bash bench/ray_cpp_bench.sh run`, which starts one.\n");
    return 2;
  }
  config.code_search_path = {FlagValue(argc, argv, "code_search_path", DefaultCodeSearchPath())};
  if (access(config.code_search_path[0].c_str(), R_OK) != 0) {
    std::fprintf(stderr,
                 "ray_cpp_bench: the workers' code %s is missing; build it with "
                 "`bash bench/ray_cpp_bench.sh build` or pass --code_search_path=X.so.\n",
                 config.code_search_path[0].c_str());
    return 2;
  }
  // Not ray::Init(config, argc, argv): Ray would parse argv with absl and reject our flags.
  ray::Init(config);

  if (wanted({"single_client_get_calls"})) {
    auto ref = ray::Put(0);
    Report("single_client_get_calls",
           Rate(1000, seconds,
                [&] {
                  for (int i = 0; i < 1000; ++i) ray::Get(ref);
                }),
           "per_second");
  }
  if (wanted({"single_client_put_calls"}))
    Report("single_client_put_calls",
           Rate(1000, seconds,
                [] {
                  for (int i = 0; i < 1000; ++i) ray::Put(0);
                }),
           "per_second");
  if (wanted({"single_client_put_gigabytes"})) {
    // 80 MiB, like Troupe's std::vector<int64_t>(10 Mi, 0) and Ray's np.zeros(10 Mi, int64), as
    // bytes: msgpack writes a std::vector<uint8_t> as one `bin` (a memcpy); a vector<int64_t>
    // would be packed element by element. The pages are written (zeroed) before the first put.
    std::vector<uint8_t> big(10 * 1024 * 1024 * sizeof(int64_t), 0);
    const double puts = Rate(1, seconds, [&] { ray::Put(big); });
    Report("single_client_put_gigabytes", puts * big.size() / 1e9, "GB_per_second");
  }
  if (wanted({"single_client_tasks_sync"}))
    Report("single_client_tasks_sync",
           Rate(100, seconds,
                [] {
                  for (int i = 0; i < 100; ++i) ray::Get(ray::Task(SmallValue).Remote());
                }),
           "per_second");
  if (wanted({"single_client_tasks_async"}))
    Report("single_client_tasks_async",
           Rate(1000, seconds,
                [] {
                  std::vector<ray::ObjectRef<int>> refs(1000);
                  for (int i = 0; i < 1000; ++i) refs[i] = ray::Task(SmallValue).Remote();
                  ray::Get(refs);
                }),
           "per_second");
  if (wanted({"multi_client_tasks_async"}))
    Report("multi_client_tasks_async",
           Rate(4000, seconds,
                [] {
                  std::vector<ray::ObjectRef<int>> clients(4);
                  for (int c = 0; c < 4; ++c) clients[c] = ray::Task(SubmitMany).Remote(1000);
                  ray::Get(clients);
                }),
           "per_second");
  // ray::Wait has no fetch_local option (Ray's C++ runtime always passes fetch_local=true).
  if (wanted({"single_client_wait_1k_refs"}))
    Report("single_client_wait_1k_refs",
           Rate(1, seconds,
                [] {
                  std::vector<ray::ObjectRef<int>> not_ready(1000);
                  for (int i = 0; i < 1000; ++i) not_ready[i] = ray::Task(SmallValue).Remote();
                  while (!not_ready.empty()) {
                    auto result = ray::Wait(not_ready, 1, -1);
                    not_ready.assign(result.unready.begin(), result.unready.end());
                  }
                }),
           "per_second");
  if (wanted({"single_client_get_object_containing_10k_refs"}))
    Unsupported("single_client_get_object_containing_10k_refs", "per_second",
                "Ray's C++ API serializes an ObjectRef inside a value as its bare ID: the "
                "contained refs are not registered with the owner (no borrowing), so an object "
                "holding refs is not a supported value");
  if (wanted({"1_1_actor_calls_sync", "1_1_actor_calls_async", "1_1_actor_call_sync_latency_us"})) {
    auto actor = ray::Actor(Echo::Create).Remote();
    ray::Get(actor.Task(&Echo::Small).Remote());
    auto sync_calls = [&] {
      for (int i = 0; i < 100; ++i) ray::Get(actor.Task(&Echo::Small).Remote());
    };
    if (wanted({"1_1_actor_calls_sync"}))
      Report("1_1_actor_calls_sync", Rate(100, seconds, sync_calls), "per_second");
    if (wanted({"1_1_actor_calls_async"}))
      Report("1_1_actor_calls_async",
             Rate(1000, seconds,
                  [&] {
                    std::vector<ray::ObjectRef<int>> refs(1000);
                    for (int i = 0; i < 1000; ++i) refs[i] = actor.Task(&Echo::Small).Remote();
                    ray::Get(refs);
                  }),
             "per_second");
    if (wanted({"1_1_actor_call_sync_latency_us"}))
      Report("1_1_actor_call_sync_latency_us", 1e6 / Rate(100, seconds, sync_calls),
             "microseconds");
    actor.Kill();
  }
  if (wanted({"1_1_actor_calls_concurrent"})) {
    // A threaded actor (16 threads), as Echo.options(max_concurrency=16) in Python.
    auto actor = ray::Actor(Echo::Create).SetMaxConcurrency(16).Remote();
    ray::Get(actor.Task(&Echo::Small).Remote());
    Report("1_1_actor_calls_concurrent",
           Rate(1000, seconds,
                [&] {
                  std::vector<ray::ObjectRef<int>> refs(1000);
                  for (int i = 0; i < 1000; ++i) refs[i] = actor.Task(&Echo::Small).Remote();
                  ray::Get(refs);
                }),
           "per_second");
    actor.Kill();
  }
  if (wanted(
          {"1_n_actor_calls_async", "n_n_actor_calls_async", "n_n_actor_calls_with_arg_async"})) {
    std::vector<ray::ActorHandle<Echo>> actors;
    for (int i = 0; i < 4; ++i) actors.push_back(ray::Actor(Echo::Create).Remote());
    for (auto& actor : actors) ray::Get(actor.Task(&Echo::Small).Remote());
    if (wanted({"1_n_actor_calls_async"}))
      Report("1_n_actor_calls_async",
             Rate(1000, seconds,
                  [&] {
                    std::vector<ray::ObjectRef<int>> refs(1000);
                    for (int i = 0; i < 1000; ++i)
                      refs[i] = actors[i % 4].Task(&Echo::Small).Remote();
                    ray::Get(refs);
                  }),
             "per_second");
    for (bool with_arg : {false, true}) {
      const char* metric = with_arg ? "n_n_actor_calls_with_arg_async" : "n_n_actor_calls_async";
      if (!wanted({metric})) continue;
      Report(metric,
             Rate(4000, seconds,
                  [&] {
                    std::vector<ray::ObjectRef<int>> clients(actors.size());
                    for (size_t c = 0; c < actors.size(); ++c)
                      clients[c] = ray::Task(CallActor).Remote(actors[c], 1000, with_arg);
                    ray::Get(clients);
                  }),
             "per_second");
    }
    for (auto& actor : actors) actor.Kill();
  }
  // Ray's own `ray microbenchmark` also measures async (asyncio) actors; C++ has none.
  for (const char* metric :
       {"1_1_async_actor_calls_sync", "1_1_async_actor_calls_async",
        "1_1_async_actor_calls_with_args_async", "n_n_async_actor_calls_async"}) {
    if (!wanted({metric})) continue;
    Unsupported(metric, "per_second",
                "Ray's C++ API has no async actors (no coroutines; only threaded actors via "
                "SetMaxConcurrency, measured as 1_1_actor_calls_concurrent)");
  }
  if (wanted({"actor_creation_per_second"}))
    Report("actor_creation_per_second",
           Rate(8, seconds,
                [] {
                  std::vector<ray::ActorHandle<Echo>> actors;
                  for (int i = 0; i < 8; ++i) actors.push_back(ray::Actor(Echo::Create).Remote());
                  for (auto& actor : actors) ray::Get(actor.Task(&Echo::Small).Remote());
                  for (auto& actor : actors) actor.Kill();
                }),
           "per_second");
  // ray_perf.py's placement group create/removal: 100 groups of one {"custom": 0.001} bundle
  // created together, each waited for (PlacementGroup::Wait is a GCS call,
  // WaitPlacementGroupReady, like Python's pg.wait()), then all removed; the head has
  // {"custom": 100} (bench/ray_cpp_bench.sh), as ray_perf.py's ray.init(resources=...).
  if (wanted({"placement_group_create_removal_per_second"}))
    Report("placement_group_create_removal_per_second",
           Rate(100, seconds,
                [] {
                  std::vector<ray::PlacementGroup> groups;
                  groups.reserve(100);
                  for (int i = 0; i < 100; ++i) {
                    groups.push_back(ray::CreatePlacementGroup(
                        {"", {{{"custom", 0.001}}}, ray::PlacementStrategy::PACK}));
                  }
                  for (auto& group : groups) {
                    if (!group.Wait(30)) {
                      throw std::runtime_error("placement group not ready within 30 s");
                    }
                  }
                  for (auto& group : groups) ray::RemovePlacementGroup(group.GetID());
                }),
           "per_second");
  ray::Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ray_cpp_bench: %s\n", e.what());
    return 1;
  }
}
