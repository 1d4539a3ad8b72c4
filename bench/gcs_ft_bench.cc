// Troupe's side of the GCS fault-tolerance benchmark (bench/gcs_ft_bench.py starts a one-node
// head with `troupe start --head --redis-address=...` or without Redis, runs this driver against
// it, and does the same with Ray). Prints JSON lines:
//   --mode=recovery --gcs-pid-file=<session>/pids/gcs.pid
//     Creates an actor and calls it (warm-up), SIGKILLs the GCS whose pid the file holds, and
//     times until an actor created afterwards answers a method call. The head's supervisor
//     restarts the GCS (which reloads its tables from Redis); nothing here restarts it. An
//     attempt that fails during the outage is retried (the time keeps running). Then checks that
//     the actor made before the kill still answers and that the pid file names a new process.
//     A side thread polls every 2 ms for the breakdown: restarted_after (the pid file names a new
//     process) and listening_after (the GCS port accepts a TCP connection; --watch-port=0: off).
//     {"metric": "gcs_kill_to_actor_created", "value": <s>, "unit": "s", "old_gcs_pid": ...,
//      "new_gcs_pid": ..., "failed_attempts": ..., "restarted_after": <s>, "listening_after": <s>}
//   --mode=throughput --actors=N --pgs=M
//     N actors in batches of 8 (each created, called once, killed), then M placement groups of
//     one {CPU: 1} bundle (each created, waited for, removed); a warm-up batch and group first.
//     {"metric": "actor_creations_per_second", ...}
//     {"metric": "placement_group_create_removal_per_second", ...}
// Usage (TROUPE_ADDRESS/TROUPE_TOKEN set): gcs_ft_bench --mode=recovery|throughput [flags]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <atomic>
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

// True if something accepts TCP connections on 127.0.0.1:`port`.
bool Listening(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return ok;
}

int Recovery(const std::string& pid_file, bool watch_port) {
  const char* address = std::getenv("TROUPE_ADDRESS");
  const std::string gcs_address = address ? address : "";
  const int gcs_port = std::atoi(gcs_address.substr(gcs_address.rfind(':') + 1).c_str());
  auto warm = troupe::Actor(Echo::Create).Remote();
  if (*troupe::Get(warm.Task(&Echo::Ping).Remote(), std::chrono::seconds(120)) != 1) return 1;
  const int old_pid = ReadPid(pid_file);
  if (old_pid <= 0) {
    std::fprintf(stderr, "no GCS pid in %s\n", pid_file.c_str());
    return 1;
  }
  // A breakdown, watched from the side (polling every 2 ms): when the pid file names a new
  // process (the supervisor restarted the GCS) and when the GCS port accepts connections again.
  std::atomic<double> restarted_after{-1}, listening_after{-1};
  std::atomic<bool> stop_watching{false};
  const auto start = Clock::now();
  std::thread watcher([&] {
    while (!stop_watching && restarted_after < 0) {
      const int pid = ReadPid(pid_file);
      if (pid > 0 && pid != old_pid) restarted_after = Seconds(start);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    while (watch_port && !stop_watching && listening_after < 0) {
      if (Listening(gcs_port)) listening_after = Seconds(start);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  if (kill(old_pid, SIGKILL) != 0) {
    std::perror("kill");
    stop_watching = true;
    watcher.join();
    return 1;
  }
  int failed_attempts = 0;
  while (true) {
    try {
      auto actor = troupe::Actor(Echo::Create).Remote();
      if (*troupe::Get(actor.Task(&Echo::Ping).Remote(), std::chrono::seconds(300)) == 1) break;
    } catch (const troupe::TroupeError& error) {
      if (++failed_attempts == 1) std::fprintf(stderr, "attempt failed: %s\n", error.what());
      if (Seconds(start) > 300) {
        std::fprintf(stderr, "no actor within 300 s of the GCS kill\n");
        std::exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  const double seconds = Seconds(start);
  stop_watching = true;
  watcher.join();
  // The actor made before the kill lived through the outage.
  if (*troupe::Get(warm.Task(&Echo::Ping).Remote(), std::chrono::seconds(60)) != 1) return 1;
  const int new_pid = ReadPid(pid_file);
  if (new_pid == old_pid || !Alive(new_pid)) {
    std::fprintf(stderr, "%s names pid %d (killed: %d): the GCS was not restarted\n",
                 pid_file.c_str(), new_pid, old_pid);
    return 1;
  }
  std::printf(
      "{\"metric\": \"gcs_kill_to_actor_created\", \"value\": %.3f, \"unit\": \"s\", "
      "\"old_gcs_pid\": %d, \"new_gcs_pid\": %d, \"failed_attempts\": %d, "
      "\"restarted_after\": %.3f, \"listening_after\": %.3f}\n",
      seconds, old_pid, new_pid, failed_attempts, restarted_after.load(), listening_after.load());
  std::fflush(stdout);
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
  auto group =
      troupe::CreatePlacementGroup({"", {{{"CPU", 1}}}, troupe::PlacementStrategy::kPack});
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
    rc = Recovery(FlagValue(argc, argv, "gcs-pid-file", ""),
                  FlagValue(argc, argv, "watch-port", "1") == "1");
  } else if (mode == "throughput") {
    rc = Throughput(std::stoi(FlagValue(argc, argv, "actors", "200")),
                    std::stoi(FlagValue(argc, argv, "pgs", "200")));
  } else {
    std::fprintf(stderr,
                 "usage: gcs_ft_bench --mode=recovery --gcs-pid-file=PATH\n"
                 "       gcs_ft_bench --mode=throughput [--actors=N] [--pgs=M]\n");
  }
  troupe::Shutdown();
  return rc;
}
