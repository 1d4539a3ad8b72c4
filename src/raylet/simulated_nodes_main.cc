// troupe_simulated_nodes: N simulated nodes (src/raylet/simulated_nodes.h) joined to a running
// cluster, for scale tests and bench/scale_bench.py.
//   troupe_simulated_nodes --address=HOST:PORT --token=TOKEN --nodes=N
//       [--resources=CPU:1,custom:2] [--report-period-ms=500] [--report-threads=4]
//       [--poll-timeout-ms=1000] [--churn] [--task-ms=10] [--seed=1] [--commands]
// --churn: each node redraws a background load before every report, so its available
// resources change on every report (a busy cluster); without it they change only with the
// leases its pretend workers hold (an idle cluster). --task-ms: how long a pretend worker takes
// to answer a task placed on a simulated node (simulated_nodes.h says what it does not do).
// --address/--token default to $TROUPE_ADDRESS/$TROUPE_TOKEN. Prints one JSON line once every
// node is registered: {"event": "ready", "nodes": N, "register_seconds": S}. Then runs until
// SIGTERM or SIGINT (every node unregisters) or SIGKILL (every node is left for the GCS's health
// checks to find dead). With --commands it reads commands from stdin instead, one a line:
//   kill   a node vanishes (server closed, no unregistering); prints
//          {"metric": "node_death_published", "value": S, "unit": "s"} once a live node's poll
//          delivered its death (or "value": null after 120 s)
//   stats  prints {"reports_ok": N, "reports_failed": N, "reports_changed": N,
//          "view_entries_received": N, "leases_granted": N, "leases_refused": N,
//          "leases_returned": N, "tasks_run": N} (totals since the start)
//   stop   (or end of input) every node unregisters; the program exits
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "src/raylet/simulated_nodes.h"

namespace {

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

bool HasFlag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i] == "--" + name) return true;
  }
  return false;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "troupe_simulated_nodes: %s\n", message.c_str());
  return 2;
}

void RunCommands(troupe::SimulatedNodes* nodes) {
  int next_victim = 0;
  for (std::string line; std::getline(std::cin, line);) {
    if (line == "stop") break;
    if (line == "stats") {
      const troupe::SimulatedNodeCounters& counters = nodes->counters();
      std::printf(
          "{\"reports_ok\": %lld, \"reports_failed\": %lld, \"reports_changed\": %lld, "
          "\"view_entries_received\": %lld, \"leases_granted\": %lld, \"leases_refused\": %lld, "
          "\"leases_returned\": %lld, \"tasks_run\": %lld}\n",
          static_cast<long long>(nodes->reports_ok()),
          static_cast<long long>(nodes->reports_failed()),
          static_cast<long long>(nodes->reports_changed()),
          static_cast<long long>(nodes->view_entries_received()),
          static_cast<long long>(counters.leases_granted.load()),
          static_cast<long long>(counters.leases_refused.load()),
          static_cast<long long>(counters.leases_returned.load()),
          static_cast<long long>(counters.tasks_run.load()));
    } else if (line == "kill" && next_victim < nodes->num_nodes() - 1) {
      troupe::NodeId victim = nodes->Kill(next_victim++);
      auto took = nodes->WaitDeathPublished(victim, absl::Seconds(120));
      if (took.has_value()) {
        std::printf("{\"metric\": \"node_death_published\", \"value\": %.3f, \"unit\": \"s\"}\n",
                    absl::ToDoubleSeconds(*took));
      } else {
        std::printf("{\"metric\": \"node_death_published\", \"value\": null, \"unit\": \"s\"}\n");
      }
    } else {
      std::printf("{\"error\": \"unknown command or no node left to kill\"}\n");
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  troupe::SimulatedNodesOptions options;
  options.gcs_address = Flag(argc, argv, "address", Env("TROUPE_ADDRESS"));
  options.token = Flag(argc, argv, "token", Env("TROUPE_TOKEN"));
  if (options.gcs_address.empty() || options.token.empty()) {
    return Fail("--address and --token (or $TROUPE_ADDRESS and $TROUPE_TOKEN) are required");
  }
  int period_ms = 500, poll_ms = 1000, task_ms = 10;
  if (!absl::SimpleAtoi(Flag(argc, argv, "nodes", "20"), &options.num_nodes) ||
      !absl::SimpleAtoi(Flag(argc, argv, "task-ms", "10"), &task_ms) ||
      !absl::SimpleAtoi(Flag(argc, argv, "seed", "1"), &options.seed) ||
      !absl::SimpleAtoi(Flag(argc, argv, "report-period-ms", "500"), &period_ms) ||
      !absl::SimpleAtoi(Flag(argc, argv, "poll-timeout-ms", "1000"), &poll_ms) ||
      !absl::SimpleAtoi(Flag(argc, argv, "report-threads", "4"), &options.report_threads)) {
    return Fail(
        "--nodes, --report-period-ms, --poll-timeout-ms, --report-threads, --task-ms and --seed "
        "take integers");
  }
  if (options.num_nodes < 1 || period_ms < 1 || task_ms < 0) {
    return Fail("--nodes and --report-period-ms must be at least 1, --task-ms at least 0");
  }
  options.churn = HasFlag(argc, argv, "churn");
  options.task_run_time = absl::Milliseconds(task_ms);
  options.report_period = absl::Milliseconds(period_ms);
  options.poll_timeout = absl::Milliseconds(poll_ms);
  if (std::string spec = Flag(argc, argv, "resources", ""); !spec.empty()) {
    options.resources.clear();
    for (absl::string_view item : absl::StrSplit(spec, ',')) {
      std::pair<std::string, std::string> kv = absl::StrSplit(item, ':');
      double amount = 0;
      if (kv.first.empty() || !absl::SimpleAtod(kv.second, &amount)) {
        return Fail("--resources takes NAME:AMOUNT,NAME:AMOUNT");
      }
      options.resources[kv.first] = amount;
    }
  }
  // Signals are taken by sigwait below, not by a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  troupe::SimulatedNodes nodes(options);
  const absl::Time start = absl::Now();
  if (absl::Status status = nodes.Start(); !status.ok()) return Fail(status.ToString());
  std::printf("{\"event\": \"ready\", \"nodes\": %d, \"register_seconds\": %.3f}\n",
              nodes.num_nodes(), absl::ToDoubleSeconds(absl::Now() - start));
  std::fflush(stdout);
  if (HasFlag(argc, argv, "commands")) {
    RunCommands(&nodes);
  } else {
    int received = 0;
    sigwait(&signals, &received);
  }
  nodes.Stop();
  return 0;
}
