// `troupe`: the command-line entry point. The same executable also runs the daemons it starts
// (`troupe gcs-server`, `troupe raylet`), so a node needs one binary.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/common/flag_parser.h"
#include "src/common/logging.h"
#include "src/common/mutex_settings.h"
#include "src/common/version.h"
#include "troupe/api.h"

namespace {

constexpr char kUsage[] =
    "Usage: troupe <command> [flags]\n"
    "\n"
    "Troupe: an actor-based distributed task framework for C++.\n"
    "\n"
    "Commands:\n"
    "  start       Start a head node (--head) or join a cluster (--address=HOST:PORT)\n"
    "  stop        Stop the nodes started on this machine (under one --temp-dir)\n"
    "  status      Show the cluster's nodes and resources\n"
    "  job         Submit and manage jobs: submit, status, logs, stop, list, delete\n"
    "  list        List tasks, actors, objects, workers, nodes, jobs or placement groups\n"
    "  get         Print one task, actor, object, worker, node, job or placement group\n"
    "  summary     Count tasks, actors or objects by name/class and state\n"
    "  memory      Objects in the object stores by node: size, owner, spilled, pinned by\n"
    "  remove      Remove a placement group (troupe remove placement-group ID|NAME)\n"
    "  logs        List or print any node's log files (--node-id, --actor-id, --tail, ...)\n"
    "  timeline    Write the task timeline as Chrome trace JSON (-o trace.json; Perfetto)\n"
    "  train launch  Run a distributed training script as N ranks (torchrun-style)\n"
    "  tls make-ca   Make a cluster CA (ca.crt, ca.key) for start --ca-cert/--ca-key\n"
    "\n"
    "Daemons (started for you by `troupe start`):\n"
    "  gcs-server  Run the global control store in the foreground\n"
    "  raylet      Run a raylet in the foreground\n"
    "  http-server Run the head's HTTP server (jobs API, /metrics) in the foreground\n"
    "  head-supervisor  Run the head's HTTP server (and, with Redis, the GCS) as children, "
    "restarting them when they die\n"
    "\n"
    "`troupe <command> --help` or `troupe help <command>` shows a command's flags.\n";

// `troupe train launch ...`; `troupe train --help`.
int TrainCommand(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    printf(
        "Usage: troupe train launch [flags] -- CMD ARGS...\n"
        "  Runs a distributed training script as N ranks (torchrun-style); "
        "`troupe train launch --help` shows its flags.\n");
    return 0;
  }
  if (args.empty() || args[0] != "launch") {
    std::string hint;
    if (!args.empty()) {
      if (std::string close = troupe::ClosestName(args[0], {"launch"}); !close.empty()) {
        hint = " (did you mean 'launch'?)";
      }
    }
    fprintf(stderr, "troupe train: the subcommand is `launch`%s: troupe train launch --help\n",
            hint.c_str());
    return 2;
  }
  return troupe::TrainLaunchCommand(std::vector<std::string>(args.begin() + 1, args.end()));
}

// The commands `troupe COMMAND` runs (the daemons too), by name.
using Command = int (*)(const std::vector<std::string>&);
const std::map<std::string, Command>& Commands() {
  static const auto* commands =
      new std::map<std::string, Command>{{"start", troupe::StartCommand},
                                         {"stop", troupe::StopCommand},
                                         {"status", troupe::StatusCommand},
                                         {"job", troupe::JobCommand},
                                         {"list", troupe::ListCommand},
                                         {"get", troupe::GetCommand},
                                         {"summary", troupe::SummaryCommand},
                                         {"memory", troupe::MemoryCommand},
                                         {"remove", troupe::RemoveCommand},
                                         {"logs", troupe::LogsCommand},
                                         {"timeline", troupe::TimelineCommand},
                                         {"tls", troupe::TlsCommand},
                                         {"train", TrainCommand},
                                         {"gcs-server", troupe::GcsServerCommand},
                                         {"raylet", troupe::RayletCommand},
                                         {"http-server", troupe::HttpServerMain},
                                         {"head-supervisor", troupe::HeadSupervisorMain}};
  return *commands;
}

// "troupe: unknown command 'X'" with the closest command, and the usage; exit status 2.
int UnknownCommand(const std::string& command) {
  std::vector<std::string> names;
  for (const auto& [name, run] : Commands()) names.push_back(name);
  std::string hint;
  if (std::string close = troupe::ClosestName(command, names); !close.empty()) {
    hint = "; did you mean '" + close + "'?";
  }
  fprintf(stderr, "troupe: unknown command '%s'%s\n\n%s", command.c_str(), hint.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  troupe::UseProductionMutexSettings();
  // `troupe train launch` runs its ranks' actors in workers started from this same executable.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  if (const char* level = std::getenv("TROUPE_LOG_LEVEL"); level && !std::strcmp(level, "debug")) {
    troupe::SetMinLogSeverity(troupe::LogSeverity::kDebug);
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    printf("%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version")) {
    printf("troupe %s\n", troupe::kTroupeVersion);
    return 0;
  }
  const std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "help") {
    // `troupe help COMMAND [SUBCOMMAND...]` is `troupe COMMAND [SUBCOMMAND...] --help`.
    if (args.empty()) return printf("%s", kUsage), 0;
    const std::string topic = args[0];
    auto it = Commands().find(topic);
    if (it == Commands().end()) return UnknownCommand(topic);
    std::vector<std::string> help_args(args.begin() + 1, args.end());
    help_args.push_back("--help");
    return it->second(help_args);
  }
  auto it = Commands().find(command);
  if (it == Commands().end()) return UnknownCommand(command);
  return it->second(args);
}
