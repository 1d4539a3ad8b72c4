// The `troupe` subcommands. Each takes the arguments after its name and returns the process
// exit code (0 ok, 1 failed, 2 bad usage), printing errors to stderr.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace troupe {

// Prints "troupe COMMAND: MESSAGE" to stderr and returns `code` (a command's exit status).
inline int FailCommand(const std::string& command, const std::string& message, int code = 1) {
  std::fprintf(stderr, "troupe %s: %s\n", command.c_str(), message.c_str());
  return code;
}

int StartCommand(const std::vector<std::string>& args);
int StopCommand(const std::vector<std::string>& args);
int StatusCommand(const std::vector<std::string>& args);
// `troupe train launch [flags] -- CMD ARGS...` (src/cli/train_launch_command.cc).
int TrainLaunchCommand(const std::vector<std::string>& args);
// `troupe job ...` (src/cli/job_command.cc): a client of the head's HTTP API.
int JobCommand(const std::vector<std::string>& args);
// `troupe list|get|summary|memory` (src/cli/state_command.cc): the state API.
int ListCommand(const std::vector<std::string>& args);
int GetCommand(const std::vector<std::string>& args);
int SummaryCommand(const std::vector<std::string>& args);
int MemoryCommand(const std::vector<std::string>& args);
// `troupe remove placement-group ID|NAME` (src/cli/remove_command.cc), through the HTTP API.
int RemoveCommand(const std::vector<std::string>& args);
// `troupe logs` (src/cli/logs_command.cc): every node's log files, through the head.
int LogsCommand(const std::vector<std::string>& args);
// `troupe timeline [--job ID] -o FILE` (src/cli/timeline_command.cc): Chrome trace of task runs.
int TimelineCommand(const std::vector<std::string>& args);
// `troupe tls make-ca --out=DIR` (src/cli/tls_command.cc): a cluster CA to give heads and nodes.
int TlsCommand(const std::vector<std::string>& args);
// `troupe gcs-server [flags]` (src/cli/gcs_command.cc): runs a GCS in the foreground.
int GcsServerCommand(const std::vector<std::string>& args);
// `troupe raylet ...` (src/cli/raylet_command.cc): runs a raylet in the foreground until
// SIGTERM/SIGINT.
int RayletCommand(const std::vector<std::string>& args);
// `troupe http-server` (src/cli/http_command.cc): the head's HTTP server daemon.
int HttpServerMain(const std::vector<std::string>& args);
// Its exit code when it stopped because the GCS was gone (the head supervisor does not restart it).
inline constexpr int kHttpServerGcsLostExitCode = 3;
// `troupe head-supervisor` (src/cli/head_supervisor_command.cc): started by `troupe start --head`;
// runs the head's HTTP server (and, with Redis, the GCS) as children and restarts them.
int HeadSupervisorMain(const std::vector<std::string>& args);

}  // namespace troupe
