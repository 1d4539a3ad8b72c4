// Troupe's side of bench/scale_bench.py: a driver against a running cluster (TROUPE_ADDRESS and
// TROUPE_TOKEN set). Prints one JSON object per line: {"metric": ..., "value": ..., "unit": ...}.
//   --mode=latency --n=N        N tasks one after another (submit, wait): median and p99
//                               submit-to-result time (the scheduling latency under load)
//   --mode=many_tasks --n=N     N tiny 1-CPU tasks submitted at once, then all awaited:
//                               submission rate, tasks still queued when the last was
//                               submitted (the most held), completion rate, driver peak RSS
//   --mode=many_actors --n=N    N actors (no resources held) created at once and each called
//                               once, all alive together: creation rate; then `--hold=S` seconds
//                               (default 6) idle, so the runner can read RSS and idle CPU per
//                               actor process; then all killed
//   --mode=many_pgs --n=N       N placement groups of one {CPU: 0.001} bundle created at once,
//                               awaited, asked once more (one round trip each, a floor), then
//                               removed: create, round-trip and remove rates
//   --mode=sim_tasks --n=S      for S seconds, waves of --wave=W (default 1000) tasks needing
//                               {sim: 1}, a resource only simulated nodes have
//                               (troupe_simulated_nodes --resources=sim:...): the head's raylet
//                               spills their leases back to simulated nodes, whose pretend
//                               workers answer them. Prints "begin" once the first wave is
//                               done, then tasks completed per second from there and how many
//                               failed (a failed task is counted, not retried)
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "troupe/api.h"

namespace {

int Small() { return 1; }

// Runs on simulated nodes only: a void task's Get reads no value (their pretend workers compute
// none).
void SimTask() {}

class Tiny {
 public:
  static Tiny* Create() { return new Tiny(); }
  int Ping() { return 1; }
};

TROUPE_REMOTE(Small, SimTask, Tiny::Create, &Tiny::Ping);

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void Print(const char* metric, double value, const char* unit) {
  std::printf("{\"metric\": \"%s\", \"value\": %.4f, \"unit\": \"%s\"}\n", metric, value, unit);
  std::fflush(stdout);
}

// A point the runner acts on (reads RSS, CPU time) while this driver goes on or pauses;
// "begin" and "end" bracket a phase of n operations (the runner reads the daemons' CPU time).
void Event(const char* name, int n, const char* phase = "") {
  std::printf("{\"event\": \"%s\", \"phase\": \"%s\", \"n\": %d}\n", name, phase, n);
  std::fflush(stdout);
}

double PeakRssMb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

void Latency(int n) {
  troupe::Get(troupe::Task(Small).Remote());  // a warm worker
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    auto start = Clock::now();
    troupe::Get(troupe::Task(Small).Remote());
    ms.push_back(Seconds(start) * 1000);
  }
  std::sort(ms.begin(), ms.end());
  Print("task_latency_median", ms[ms.size() / 2], "ms");
  Print("task_latency_p99", ms[std::min(ms.size() - 1, ms.size() * 99 / 100)], "ms");
}

void ManyTasks(int n) {
  troupe::Get(troupe::Task(Small).Remote());
  std::vector<troupe::ObjectRef<int>> refs;
  refs.reserve(n);
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) refs.push_back(troupe::Task(Small).Remote());
  Print("tasks_submitted_per_second", n / Seconds(start), "per_second");
  // Tasks queued when the last was submitted (not finished yet): the largest queue held.
  const size_t done = troupe::Wait(refs, n, std::chrono::milliseconds(0)).ready.size();
  Print("tasks_queued_at_end_of_submission", static_cast<double>(n - done), "tasks");
  troupe::Get(refs);
  Print("tasks_completed_per_second", n / Seconds(start), "per_second");
  Print("driver_peak_rss", PeakRssMb(), "MiB");
}

void ManyActors(int n, double hold_seconds) {
  std::vector<troupe::ActorHandle<Tiny>> actors;
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) actors.push_back(troupe::Actor(Tiny::Create).Remote());
  std::vector<troupe::ObjectRef<int>> pings;
  for (auto& actor : actors) pings.push_back(actor.Task(&Tiny::Ping).Remote());
  troupe::Get(pings, std::chrono::seconds(600));
  Print("actors_created_per_second", n / Seconds(start), "per_second");
  Event("actors_alive", n);
  // The runner reads RSS and idle CPU now and, for the GCS, again 2 s later (scale_bench.py
  // SETTLE_S), so the default hold covers both reads.
  std::this_thread::sleep_for(std::chrono::duration<double>(hold_seconds));
  for (auto& actor : actors) actor.Kill();
}

void ManyPgs(int n) {
  std::vector<troupe::PlacementGroup> groups;
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    groups.push_back(
        troupe::CreatePlacementGroup({"", {{{"CPU", 0.001}}}, troupe::PlacementStrategy::kPack}));
  }
  for (auto& group : groups) {
    if (!group.Wait(std::chrono::seconds(300))) {
      std::fprintf(stderr, "a placement group was not ready in 300 s\n");
      std::exit(1);
    }
  }
  Print("pgs_created_per_second", n / Seconds(start), "per_second");
  Event("begin", n, "round_trip");
  start = Clock::now();
  for (auto& group : groups) group.Wait(std::chrono::seconds(1));  // answered at once: CREATED
  Print("pg_round_trips_per_second", n / Seconds(start), "per_second");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // as after the removals below
  Event("end", n, "round_trip");
  Event("begin", n, "removal");
  start = Clock::now();
  for (auto& group : groups) troupe::RemovePlacementGroup(group);
  Print("pgs_removed_per_second", n / Seconds(start), "per_second");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // returns in flight land
  Event("end", n, "removal");
}

// One wave of `wave` tasks on simulated nodes, awaited: how many failed.
int64_t SimWave(int wave) {
  std::vector<troupe::ObjectRef<void>> refs;
  refs.reserve(wave);
  for (int i = 0; i < wave; ++i) {
    refs.push_back(troupe::Task(SimTask).SetResources({{"sim", 1}}).Remote());
  }
  int64_t failed = 0;
  for (const auto& ref : refs) {
    try {
      troupe::Get(ref, std::chrono::seconds(120));
    } catch (const troupe::TroupeError& error) {
      if (failed++ == 0)
        std::fprintf(stderr, "a task on a simulated node failed: %s\n", error.what());
    }
  }
  return failed;
}

void SimTasks(double seconds, int wave) {
  int64_t failed = SimWave(wave);  // leases and connections to the nodes warm up
  Event("begin", wave, "sim_tasks");
  auto start = Clock::now();
  int64_t done = 0;
  while (Seconds(start) < seconds) {
    failed += SimWave(wave);
    done += wave;
  }
  const double elapsed = Seconds(start);
  Event("end", static_cast<int>(done), "sim_tasks");
  Print("sim_tasks_per_second", done / elapsed, "per_second");
  Print("sim_tasks_failed", static_cast<double>(failed), "tasks");
}

}  // namespace

int main(int argc, char** argv) {
  troupe::Config config;
  config.log_to_driver = false;
  troupe::Init(config);
  const std::string mode = Flag(argc, argv, "mode", "");
  const int n = std::stoi(Flag(argc, argv, "n", "100"));
  int rc = 0;
  if (mode == "latency") {
    Latency(n);
  } else if (mode == "many_tasks") {
    ManyTasks(n);
  } else if (mode == "many_actors") {
    ManyActors(n, std::stod(Flag(argc, argv, "hold", "6")));
  } else if (mode == "many_pgs") {
    ManyPgs(n);
  } else if (mode == "sim_tasks") {
    SimTasks(n, std::stoi(Flag(argc, argv, "wave", "1000")));
  } else {
    std::fprintf(
        stderr,
        "usage: scale_bench --mode=latency|many_tasks|many_actors|many_pgs|sim_tasks --n=N "
        "[--hold=S] [--wave=W]\n");
    rc = 2;
  }
  troupe::Shutdown();
  return rc;
}
