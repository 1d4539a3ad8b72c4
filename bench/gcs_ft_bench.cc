// Troupe's side of the GCS fault-tolerance benchmark (bench/gcs_ft_bench.py starts a one-node
// head with `troupe start --head --redis-address=...` or without Redis, runs this driver against
// it, and does the same with Ray). Prints JSON lines:
//   --mode=recovery --gcs-pid-file=<session>/pids/gcs.pid
//     Reads commands on stdin, one a line:
//       populate ACTORS PGS PG_CPU KV  brings what this driver holds up to ACTORS live actors (no
//         resources; each called once), PGS ready placement groups of one {CPU: PG_CPU} bundle
//         and KV entries in the GCS KV (namespace gcs_ft_bench); prints
//         {"event": "populated", "actors": .., "pgs": .., "kv": .., "actors_s": .., ...}
//       kill  SIGKILLs the GCS whose pid the file holds, prints {"event": "killed", "t0": T}
//         (T: CLOCK_MONOTONIC seconds at the kill, for the orchestrator's own probes: the GCS
//         port, the jobs list), and times from the kill, in parallel: the pid file naming a new
//         process (restarted_after, polled every 2 ms), a new actor created and answering
//         (new_actor), an actor made before the kill answering (old_actor), a KV entry written
//         before the kill read back (kv_first).
//         The head's supervisor restarts the GCS (which reloads its tables from Redis); nothing
//         here restarts it. A call that fails during the outage is retried (the time keeps
//         running). Then counts what came through: every actor called, every group waited for,
//         every KV entry read back. Prints {"event": "trial", ...} and kills the new actor.
//       exit
//   --mode=throughput --actors=N --pgs=M
//     N actors in batches of 8 (each created, called once, killed), then M placement groups of
//     one {CPU: 1} bundle (each created, waited for, removed); a warm-up batch and group first.
//     {"metric": "actor_creations_per_second", ...}
//     {"metric": "placement_group_create_removal_per_second", ...}
// Usage (TROUPE_ADDRESS/TROUPE_TOKEN set): gcs_ft_bench --mode=recovery|throughput [flags]
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "troupe/api.h"

namespace {

class Echo {
 public:
  static Echo* Create() { return new Echo(); }
  int Ping() { return 1; }
};

TROUPE_REMOTE(Echo::Create, &Echo::Ping);

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string FlagValue(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

int ReadPid(const std::string& path) {
  std::ifstream in(path);
  int pid = 0;
  in >> pid;
  return pid;
}

bool Alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

// Monotonic seconds (CLOCK_MONOTONIC, the clock of Python's time.monotonic(), which the
// orchestrator reads to time the jobs list against the kill).
double MonotonicNow() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

const char kKvNamespace[] = "gcs_ft_bench";

std::string KvKey(int i) {
  char key[32];
  std::snprintf(key, sizeof(key), "key-%06d", i);
  return key;
}

std::string KvValue(int i) { return "value-" + std::to_string(i) + std::string(48, 'v'); }

void Emit(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// What the head holds before a kill: live actors (no resources), ready placement groups of one
// small bundle, KV entries. Grows with each `populate` command; never shrinks.
struct Population {
  std::vector<troupe::ActorHandle<Echo>> actors;
  std::vector<troupe::PlacementGroup> groups;
  int kv_entries = 0;
};

// Brings the population up to the given counts; prints one "populated" line.
void Populate(Population& population, int actors, int pgs, double pg_cpu, int kv) {
  auto start = Clock::now();
  while (static_cast<int>(population.actors.size()) < actors) {
    // Batches of 50: each batch created, then every actor of it called once.
    const size_t first = population.actors.size();
    const int n = std::min<int>(50, actors - static_cast<int>(first));
    for (int i = 0; i < n; ++i) population.actors.push_back(troupe::Actor(Echo::Create).Remote());
    std::vector<troupe::ObjectRef<int>> pings;
    for (size_t i = first; i < population.actors.size(); ++i) {
      pings.push_back(population.actors[i].Task(&Echo::Ping).Remote());
    }
    troupe::Get(pings, std::chrono::seconds(600));
    std::fprintf(stderr, "  %zu actors\n", population.actors.size());
  }
  const double actors_s = Seconds(start);
  start = Clock::now();
  const size_t first_group = population.groups.size();
  while (static_cast<int>(population.groups.size()) < pgs) {
    population.groups.push_back(
        troupe::CreatePlacementGroup({"", {{{"CPU", pg_cpu}}}, troupe::PlacementStrategy::kPack}));
  }
  for (size_t i = first_group; i < population.groups.size(); ++i) {
    if (!population.groups[i].Wait(std::chrono::seconds(120))) {
      std::fprintf(stderr, "placement group %zu not ready in 120 s\n", i);
      std::exit(1);
    }
  }
  const double pgs_s = Seconds(start);
  start = Clock::now();
  for (; population.kv_entries < kv; ++population.kv_entries) {
    troupe::internal::CurrentRuntime()->KvPut(kKvNamespace, KvKey(population.kv_entries),
                                              KvValue(population.kv_entries), true);
  }
  const double kv_s = Seconds(start);
  char line[512];
  std::snprintf(line, sizeof(line),
                "{\"event\": \"populated\", \"actors\": %zu, \"pgs\": %zu, \"kv\": %d, "
                "\"actors_s\": %.3f, \"pgs_s\": %.3f, \"kv_s\": %.3f}",
                population.actors.size(), population.groups.size(), population.kv_entries, actors_s,
                pgs_s, kv_s);
  Emit(line);
}

// Keeps trying `attempt` (which throws TroupeError while the cluster cannot serve it) until it
// returns true; returns the seconds since `start`, or -1 after 300 s. Counts failures.
template <typename F>
double TimeUntil(Clock::time_point start, std::atomic<int>& failures, F attempt) {
  while (Seconds(start) < 300) {
    try {
      if (attempt()) return Seconds(start);
    } catch (const troupe::TroupeError& error) {
      if (++failures == 1) std::fprintf(stderr, "attempt failed: %s\n", error.what());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

// One trial: SIGKILLs the GCS named by the pid file and times, from the kill, in parallel (as
// a real head's clients would all be waiting at once): the GCS process back (the pid file names
// a new process); a new actor created and answering; an
// actor made before the kill answering; a KV entry written before the kill read back. Then
// counts what came through: actors answering, groups ready, KV entries read back intact.
int Trial(Population& population, int trial, const std::string& pid_file) {
  const int old_pid = ReadPid(pid_file);
  if (old_pid <= 0) {
    std::fprintf(stderr, "no GCS pid in %s\n", pid_file.c_str());
    return 1;
  }
  std::atomic<double> restarted_after{-1};
  std::atomic<bool> stop_watching{false};
  std::atomic<int> failures{0};
  const double t0 = MonotonicNow();
  const auto start = Clock::now();
  if (kill(old_pid, SIGKILL) != 0) {
    std::perror("kill");
    return 1;
  }
  {
    char line[128];
    std::snprintf(line, sizeof(line), "{\"event\": \"killed\", \"t0\": %.6f}", t0);
    Emit(line);
  }
  // A watcher polling every 2 ms for when the pid file names a new process (the supervisor
  // restarted the GCS). The orchestrator watches the GCS port.
  std::thread watcher([&] {
    while (!stop_watching && restarted_after < 0) {
      const int pid = ReadPid(pid_file);
      if (pid > 0 && pid != old_pid) restarted_after = Seconds(start);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  troupe::ActorHandle<Echo> fresh;
  double new_actor = -1, old_actor = -1, kv_first = -1;
  std::thread new_actor_probe([&] {
    new_actor = TimeUntil(start, failures, [&] {
      fresh = troupe::Actor(Echo::Create).Remote();
      return *troupe::Get(fresh.Task(&Echo::Ping).Remote(), std::chrono::seconds(300)) == 1;
    });
  });
  const auto& old = population.actors[trial % population.actors.size()];
  std::thread old_actor_probe([&] {
    old_actor = TimeUntil(start, failures, [&] {
      return *troupe::Get(old.Task(&Echo::Ping).Remote(), std::chrono::seconds(300)) == 1;
    });
  });
  std::thread kv_probe([&] {
    if (population.kv_entries == 0) return;
    const int i = trial % population.kv_entries;
    kv_first = TimeUntil(start, failures, [&] {
      return troupe::internal::CurrentRuntime()->KvGet(kKvNamespace, KvKey(i)) == KvValue(i);
    });
  });
  new_actor_probe.join();
  old_actor_probe.join();
  kv_probe.join();
  stop_watching = true;
  watcher.join();
  const int new_pid = ReadPid(pid_file);
  if (new_pid == old_pid || !Alive(new_pid)) {
    std::fprintf(stderr, "%s names pid %d (killed: %d): the GCS was not restarted\n",
                 pid_file.c_str(), new_pid, old_pid);
    return 1;
  }
  // What came through the restart.
  std::vector<troupe::ObjectRef<int>> pings;
  for (auto& actor : population.actors) pings.push_back(actor.Task(&Echo::Ping).Remote());
  int actors_answering = 0;
  for (const auto& ping : pings) {
    try {
      actors_answering += *troupe::Get(ping, std::chrono::seconds(120)) == 1;
    } catch (const troupe::TroupeError& error) {
      std::fprintf(stderr, "an actor made before the kill failed: %s\n", error.what());
    }
  }
  int groups_ready = 0;
  for (const auto& group : population.groups) {
    groups_ready += group.Wait(std::chrono::seconds(10));
  }
  const auto read_start = Clock::now();
  int kv_read_back = 0;
  for (int i = 0; i < population.kv_entries; ++i) {
    kv_read_back += troupe::internal::CurrentRuntime()->KvGet(kKvNamespace, KvKey(i)) == KvValue(i);
  }
  const double kv_read_all_s = Seconds(read_start);
  fresh.Kill();  // keeps the population the same from trial to trial
  char line[1024];
  std::snprintf(line, sizeof(line),
                "{\"event\": \"trial\", \"restarted_after\": %.3f, "
                "\"new_actor\": %.3f, \"old_actor\": %.3f, \"kv_first\": %.3f, "
                "\"failed_attempts\": %d, \"old_gcs_pid\": %d, \"new_gcs_pid\": %d, "
                "\"actors_answering\": %d, \"actors\": %zu, \"pgs_ready\": %d, \"pgs\": %zu, "
                "\"kv_read_back\": %d, \"kv\": %d, \"kv_read_all_s\": %.3f}",
                restarted_after.load(), new_actor, old_actor, kv_first, failures.load(), old_pid,
                new_pid, actors_answering, population.actors.size(), groups_ready,
                population.groups.size(), kv_read_back, population.kv_entries, kv_read_all_s);
  Emit(line);
  return new_actor < 0 || old_actor < 0 ? 1 : 0;
}

// Reads commands from stdin, one a line, until "exit" or EOF:
//   populate ACTORS PGS PG_CPU KV   bring the population up to these counts
//   kill                            one trial (see Trial)
int Recovery(const std::string& pid_file) {
  Population population;
  int trial = 0;
  std::string command;
  while (std::cin >> command) {
    if (command == "populate") {
      int actors = 0, pgs = 0, kv = 0;
      double pg_cpu = 0;
      std::cin >> actors >> pgs >> pg_cpu >> kv;
      Populate(population, std::max(1, actors), pgs, pg_cpu, kv);
    } else if (command == "kill") {
      if (int rc = Trial(population, trial++, pid_file); rc != 0) return rc;
    } else if (command == "exit") {
      return 0;
    } else {
      std::fprintf(stderr, "unknown command '%s' (populate, kill, exit)\n", command.c_str());
      return 2;
    }
  }
  return 0;
}

void ActorBatch(int n) {
  std::vector<troupe::ActorHandle<Echo>> actors;
  for (int i = 0; i < n; ++i) actors.push_back(troupe::Actor(Echo::Create).Remote());
  std::vector<troupe::ObjectRef<int>> pings;
  for (auto& actor : actors) pings.push_back(actor.Task(&Echo::Ping).Remote());
  troupe::Get(pings);
  for (auto& actor : actors) actor.Kill();
}

void PlacementGroupCycle() {
  auto group = troupe::CreatePlacementGroup({"", {{{"CPU", 1}}}, troupe::PlacementStrategy::kPack});
  if (!group.Wait(std::chrono::seconds(60))) {
    std::fprintf(stderr, "placement group not ready in 60 s\n");
    std::exit(1);
  }
  troupe::RemovePlacementGroup(group);
}

int Throughput(int actors, int pgs) {
  ActorBatch(8);  // warm-up
  PlacementGroupCycle();
  auto start = Clock::now();
  for (int done = 0; done < actors; done += 8) ActorBatch(std::min(8, actors - done));
  std::printf(
      "{\"metric\": \"actor_creations_per_second\", \"value\": %.3f, \"unit\": \"per_second\"}\n",
      actors / Seconds(start));
  std::fflush(stdout);
  start = Clock::now();
  for (int i = 0; i < pgs; ++i) PlacementGroupCycle();
  std::printf(
      "{\"metric\": \"placement_group_create_removal_per_second\", \"value\": %.3f, "
      "\"unit\": \"per_second\"}\n",
      pgs / Seconds(start));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  troupe::Config config;
  config.log_to_driver = false;
  config.gcs_reconnect_timeout_s = 300;  // outlive the outage with room to spare
  troupe::Init(config);
  const std::string mode = FlagValue(argc, argv, "mode", "");
  int rc = 2;
  if (mode == "recovery") {
    rc = Recovery(FlagValue(argc, argv, "gcs-pid-file", ""));
  } else if (mode == "throughput") {
    rc = Throughput(std::stoi(FlagValue(argc, argv, "actors", "200")),
                    std::stoi(FlagValue(argc, argv, "pgs", "200")));
  } else {
    std::fprintf(stderr,
                 "usage: gcs_ft_bench --mode=recovery --gcs-pid-file=PATH  (commands on stdin)\n"
                 "       gcs_ft_bench --mode=throughput [--actors=N] [--pgs=M]\n");
  }
  troupe::Shutdown();
  return rc;
}
