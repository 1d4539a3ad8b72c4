// Troupe's side of the task/object microbenchmarks, named like Ray's `ray microbenchmark`.
// Prints one JSON object per line: {"metric": ..., "value": ..., "unit": ...}. Runs on an
// embedded cluster with 2 CPUs (like ray.init(num_cpus=2)). bench/microbenchmark.py runs this
// and the same workloads on Ray, and prints both with the ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "troupe/api.h"

namespace {

int SmallValue() { return 0; }

// A task acting as one of several clients, each submitting `n` tasks and waiting for them.
int SubmitMany(int n) {
  std::vector<troupe::ObjectRef<int>> refs;
  refs.reserve(n);
  for (int i = 0; i < n; ++i) refs.push_back(troupe::Task(SmallValue).Remote());
  troupe::Get(refs);
  return n;
}

class Echo {
 public:
  static Echo* Create() { return new Echo(); }
  int Small() { return 0; }
  int SmallWithArg(int x) { return x; }
};

// A client task calling its own actor `n` times (optionally with an object argument).
int CallActor(troupe::ActorHandle<Echo> actor, int n, bool with_arg) {
  std::vector<troupe::ObjectRef<int>> refs;
  refs.reserve(n);
  auto arg = troupe::Put(1);
  for (int i = 0; i < n; ++i) {
    refs.push_back(with_arg ? actor.Task(&Echo::SmallWithArg).Remote(arg)
                            : actor.Task(&Echo::Small).Remote());
  }
  troupe::Get(refs);
  return n;
}

TROUPE_REMOTE(SmallValue, SubmitMany, Echo::Create, &Echo::Small, &Echo::SmallWithArg, CallActor);

void Report(const char* metric, double value, const char* unit) {
  troupe::bench::Report(metric, value, unit);
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = std::atof(troupe::bench::FlagValue(argc, argv, "seconds", "2").c_str());
  // --batches=N: every metric runs exactly N batches (after its warm-up batch) instead of for
  // `seconds`, so a run does a fixed amount of work (instruction counts under callgrind).
  // --only=a,b: only these metrics (and what they need).
  const int batches = std::atoi(troupe::bench::FlagValue(argc, argv, "batches", "0").c_str());
  const std::vector<std::string> only =
      absl::StrSplit(troupe::bench::FlagValue(argc, argv, "only", ""), ',', absl::SkipEmpty());
  auto wanted = [&](std::initializer_list<const char*> metrics) {
    if (only.empty()) return true;
    for (const char* metric : metrics) {
      if (std::find(only.begin(), only.end(), metric) != only.end()) return true;
    }
    return false;
  };
  // --linger=S: once, after the first measured metric and before its actors are killed (and
  // Shutdown kills the workers), wait S seconds so a profiler can take the counts of the driver
  // and every worker (bench/count_instructions.sh).
  const double linger = std::atof(troupe::bench::FlagValue(argc, argv, "linger", "0").c_str());
  bool lingered = false;
  auto Linger = [&] {
    if (linger <= 0 || lingered) return;
    lingered = true;
    std::fprintf(stderr, "task_bench: lingering %.0f s\n", linger);
    std::this_thread::sleep_for(std::chrono::duration<double>(linger));
  };
  auto Rate = [&](int ops_per_batch, double secs, const std::function<void()>& batch) {
    if (batches <= 0) return troupe::bench::Rate(ops_per_batch, secs, batch);
    batch();
    const auto start = troupe::bench::Clock::now();
    for (int i = 0; i < batches; ++i) batch();
    const double rate = ops_per_batch * batches / troupe::bench::Seconds(start);
    Linger();
    return rate;
  };
  troupe::Config config;
  config.num_cpus = 2;
  config.log_to_driver = false;
  troupe::Init(config);

  if (wanted({"single_client_get_calls"}))
    Report("single_client_get_calls",
           Rate(1000, seconds,
                [ref = troupe::Put(0)] {
                  for (int i = 0; i < 1000; ++i) troupe::Get(ref);
                }),
           "per_second");
  if (wanted({"single_client_put_calls"}))
    Report("single_client_put_calls",
           Rate(1000, seconds,
                [] {
                  for (int i = 0; i < 1000; ++i) troupe::Put(0);
                }),
           "per_second");
  if (wanted({"single_client_put_gigabytes", "memcpy_warm_gigabytes", "memcpy_fresh_gigabytes"})) {
    // 80 MB like Ray's np.zeros(10 * 1024 * 1024, dtype=np.int64).
    std::vector<int64_t> big(10 * 1024 * 1024, 0);
    const double bytes = big.size() * sizeof(int64_t);
    double puts = Rate(1, seconds, [&] { troupe::Put(big); });
    Report("single_client_put_gigabytes", puts * bytes / 1e9, "GB_per_second");
    // The physical references: a plain memcpy of the same size into memory already in use
    // (warm), and into freshly allocated memory (the kernel zeroes and maps every page).
    std::vector<int64_t> warm(big.size(), 1);
    double warm_copies = Rate(1, seconds, [&] { std::memcpy(warm.data(), big.data(), bytes); });
    Report("memcpy_warm_gigabytes", warm_copies * bytes / 1e9, "GB_per_second");
    double fresh_copies = Rate(1, seconds, [&] {
      std::vector<int64_t> copy(big.size());
      std::memcpy(copy.data(), big.data(), bytes);
    });
    Report("memcpy_fresh_gigabytes", fresh_copies * bytes / 1e9, "GB_per_second");
  }
  if (wanted({"single_client_tasks_sync"}))
    Report("single_client_tasks_sync",
           Rate(100, seconds,
                [] {
                  for (int i = 0; i < 100; ++i) troupe::Get(troupe::Task(SmallValue).Remote());
                }),
           "per_second");
  double tasks_async = 0;
  if (wanted({"single_client_tasks_async", "single_client_tasks_async_over_grpc_floor"})) {
    tasks_async = Rate(1000, seconds, [] {
      std::vector<troupe::ObjectRef<int>> refs;
      refs.reserve(1000);
      for (int i = 0; i < 1000; ++i) refs.push_back(troupe::Task(SmallValue).Remote());
      troupe::Get(refs);
    });
    Report("single_client_tasks_async", tasks_async, "per_second");
  }
  // The physical floor of pipelined pushes: bare gRPC unary calls to one worker process with a
  // window of calls in flight, 4 (one leased worker's pipeline depth) and 8 (the submitter's
  // total with num_cpus=2: two leased workers, 4 each). The ratio is taken to the window-8 rate.
  if (wanted({"grpc_unary_async_calls", "grpc_unary_async_calls_window_4",
              "single_client_tasks_async_over_grpc_floor"})) {
    auto actor = troupe::Actor(Echo::Create).Remote();
    troupe::Get(actor.Task(&Echo::Small).Remote());
    const int calls = batches > 0 ? 1000 * batches : std::max(2000, int(20000 * seconds));
    troupe::internal::MeasureRawAsyncCallsPerSecond(actor.binary_id(), 1000, 8);  // warm-up
    Report("grpc_unary_async_calls_window_4",
           troupe::internal::MeasureRawAsyncCallsPerSecond(actor.binary_id(), calls, 4),
           "per_second");
    const double floor =
        troupe::internal::MeasureRawAsyncCallsPerSecond(actor.binary_id(), calls, 8);
    Report("grpc_unary_async_calls", floor, "per_second");
    if (tasks_async > 0)
      Report("single_client_tasks_async_over_grpc_floor", tasks_async / floor, "ratio");
    actor.Kill();
  }
  if (wanted({"multi_client_tasks_async"}))
    Report("multi_client_tasks_async",
           Rate(4000, seconds,
                [] {
                  std::vector<troupe::ObjectRef<int>> clients;
                  for (int c = 0; c < 4; ++c)
                    clients.push_back(troupe::Task(SubmitMany).Remote(1000));
                  troupe::Get(clients);
                }),
           "per_second");
  if (wanted({"single_client_wait_1k_refs"}))
    Report("single_client_wait_1k_refs",
           Rate(1, seconds,
                [] {
                  std::vector<troupe::ObjectRef<int>> not_ready;
                  for (int i = 0; i < 1000; ++i)
                    not_ready.push_back(troupe::Task(SmallValue).Remote());
                  while (!not_ready.empty()) not_ready = troupe::Wait(not_ready, 1).unready;
                }),
           "per_second");
  if (wanted({"single_client_get_object_containing_10k_refs"})) {
    std::vector<troupe::ObjectRef<int>> refs;
    for (int i = 0; i < 10000; ++i) refs.push_back(troupe::Put(i));
    auto outer = troupe::Put(refs);
    if (wanted({"single_client_get_object_containing_10k_refs"}))
      Report("single_client_get_object_containing_10k_refs",
             Rate(1, seconds, [&] { troupe::Get(outer); }), "per_second");
  }
  if (wanted({"1_1_actor_calls_sync", "1_1_actor_calls_async", "grpc_unary_round_trip_us",
              "1_1_actor_call_sync_latency_us"})) {
    auto actor = troupe::Actor(Echo::Create).Remote();
    troupe::Get(actor.Task(&Echo::Small).Remote());
    if (wanted({"1_1_actor_calls_sync"}))
      Report("1_1_actor_calls_sync",
             Rate(100, seconds,
                  [&] {
                    for (int i = 0; i < 100; ++i) troupe::Get(actor.Task(&Echo::Small).Remote());
                  }),
             "per_second");
    if (wanted({"1_1_actor_calls_async"}))
      Report("1_1_actor_calls_async",
             Rate(1000, seconds,
                  [&] {
                    std::vector<troupe::ObjectRef<int>> refs;
                    for (int i = 0; i < 1000; ++i)
                      refs.push_back(actor.Task(&Echo::Small).Remote());
                    troupe::Get(refs);
                  }),
             "per_second");
    // The physical floor of a synchronous call: a bare gRPC round trip to the actor's process.
    if (wanted({"grpc_unary_round_trip_us"})) {
      const double floor_us = troupe::internal::MeasureRawRoundTripMicros(actor.binary_id(), 2000);
      Report("grpc_unary_round_trip_us", floor_us, "microseconds");
    }
    if (wanted({"1_1_actor_call_sync_latency_us"})) {
      const double sync_calls = Rate(100, seconds, [&] {
        for (int i = 0; i < 100; ++i) troupe::Get(actor.Task(&Echo::Small).Remote());
      });
      Report("1_1_actor_call_sync_latency_us", 1e6 / sync_calls, "microseconds");
    }
    actor.Kill();
  }
  if (wanted({"1_1_actor_calls_concurrent"})) {
    auto actor = troupe::Actor(Echo::Create).SetMaxConcurrency(16).Remote();
    troupe::Get(actor.Task(&Echo::Small).Remote());
    if (wanted({"1_1_actor_calls_concurrent"}))
      Report("1_1_actor_calls_concurrent",
             Rate(1000, seconds,
                  [&] {
                    std::vector<troupe::ObjectRef<int>> refs;
                    for (int i = 0; i < 1000; ++i)
                      refs.push_back(actor.Task(&Echo::Small).Remote());
                    troupe::Get(refs);
                  }),
             "per_second");
    actor.Kill();
  }
  if (wanted(
          {"1_n_actor_calls_async", "n_n_actor_calls_async", "n_n_actor_calls_with_arg_async"})) {
    std::vector<troupe::ActorHandle<Echo>> actors;
    for (int i = 0; i < 4; ++i) actors.push_back(troupe::Actor(Echo::Create).Remote());
    for (auto& actor : actors) troupe::Get(actor.Task(&Echo::Small).Remote());
    if (wanted({"1_n_actor_calls_async"}))
      Report("1_n_actor_calls_async",
             Rate(1000, seconds,
                  [&] {
                    std::vector<troupe::ObjectRef<int>> refs;
                    for (int i = 0; i < 1000; ++i)
                      refs.push_back(actors[i % 4].Task(&Echo::Small).Remote());
                    troupe::Get(refs);
                  }),
             "per_second");
    for (bool with_arg : {false, true}) {
      if (!wanted({with_arg ? "n_n_actor_calls_with_arg_async" : "n_n_actor_calls_async"}))
        continue;
      Report(with_arg ? "n_n_actor_calls_with_arg_async" : "n_n_actor_calls_async",
             Rate(4000, seconds,
                  [&] {
                    std::vector<troupe::ObjectRef<int>> clients;
                    for (auto& actor : actors)
                      clients.push_back(troupe::Task(CallActor).Remote(actor, 1000, with_arg));
                    troupe::Get(clients);
                  }),
             "per_second");
    }
    for (auto& actor : actors) actor.Kill();
  }
  if (wanted({"actor_creation_per_second"}))
    Report("actor_creation_per_second",
           Rate(8, seconds,
                [] {
                  std::vector<troupe::ActorHandle<Echo>> actors;
                  for (int i = 0; i < 8; ++i)
                    actors.push_back(troupe::Actor(Echo::Create).Remote());
                  for (auto& actor : actors) troupe::Get(actor.Task(&Echo::Small).Remote());
                  for (auto& actor : actors) actor.Kill();
                }),
           "per_second");
  if (wanted({"placement_group_create_removal_per_second"}))
    Report("placement_group_create_removal_per_second",
           Rate(1, seconds,
                [] {
                  auto group = troupe::CreatePlacementGroup(
                      {"", {{{"CPU", 1}}}, troupe::PlacementStrategy::kPack});
                  group.Wait(std::chrono::seconds(30));
                  troupe::RemovePlacementGroup(group);
                }),
           "per_second");
  troupe::Shutdown();
  return 0;
}
