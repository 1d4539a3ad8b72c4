// `troupe gcs-server ...`: parses the GCS's flags into GcsServerOptions and runs a GcsServer in
// the foreground until SIGTERM/SIGINT. `troupe start --head` runs this for you.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/common/flag_parser.h"
#include "src/common/logging.h"
#include "src/gcs/gcs_server.h"
#include "src/gcs/in_memory_store_client.h"
#include "src/rpc/cluster_token.h"

namespace troupe {

int GcsServerCommand(const std::vector<std::string>& args) {
  GcsServerOptions options;  // the defaults
  std::string token_file;
  int64_t port = options.port;
  int64_t period_ms = absl::ToInt64Milliseconds(options.health_check.period);
  int64_t timeout_ms = absl::ToInt64Milliseconds(options.health_check.timeout);
  int64_t threshold = options.health_check.failure_threshold;
  FlagParser flags("troupe gcs-server",
                   "Runs the global control store in the foreground (`troupe start --head` runs "
                   "it for you).");
  flags.AddInt("port", &port, "Port to listen on (0: any free port).");
  flags.AddString("bind", &options.bind_address, "Address to listen on.");
  flags.AddString("token-file", &token_file, "File holding the cluster token (required).");
  flags.AddInt("health-check-period-ms", &period_ms, "How often each raylet is probed.");
  flags.AddInt("health-check-timeout-ms", &timeout_ms, "How long a probe may take.");
  flags.AddInt("health-check-failure-threshold", &threshold,
               "Failed probes in a row before a node is declared dead.");
  if (auto status = flags.Parse(args); !status.ok()) {
    fprintf(stderr, "troupe gcs-server: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (period_ms <= 0 || timeout_ms <= 0 || threshold <= 0) {
    fprintf(stderr, "troupe gcs-server: health check period, timeout and threshold must be > 0\n");
    return 2;
  }
  auto token = ReadTokenFile(token_file);
  if (!token.ok()) {
    fprintf(stderr, "troupe gcs-server: %s (pass --token-file)\n",
            std::string(token.status().message()).c_str());
    return 2;
  }
  options.token = *token;
  options.port = static_cast<int>(port);
  options.health_check = {absl::Milliseconds(period_ms), absl::Milliseconds(timeout_ms),
                          static_cast<int>(threshold)};

  // Block termination signals before gRPC starts threads, then wait for them here.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  GcsServer server(options, std::make_unique<InMemoryStoreClient>());
  if (auto status = server.Start(); !status.ok()) {
    TROUPE_LOG(Error) << "GCS failed to start: " << status.message();
    return 1;
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  TROUPE_LOG(Info) << "GCS stopping on signal " << signal_number;
  server.Stop();
  return 0;
}

}  // namespace troupe
