// `troupe http-server`: the head's HTTP server daemon in the foreground (src/http). Parses the
// flags, reads the token file, and stops the server on SIGTERM/SIGINT.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "src/cli/commands.h"
#include "src/common/flag_parser.h"
#include "src/http/http_server.h"
#include "src/rpc/transport_security.h"
#include "src/tls/tls_files.h"

namespace troupe {

int HttpServerMain(const std::vector<std::string>& args) {
  HttpServerOptions options;
  std::string token_file;
  int64_t port = options.port;
  FlagParser flags("troupe http-server",
                   "Runs the head's HTTP server (jobs REST API, state, /metrics) in the "
                   "foreground. `troupe start --head` starts it for you.");
  flags.AddString("address", &options.gcs_address, "host:port of the GCS.");
  flags.AddString("token-file", &token_file, "File holding the cluster token.");
  flags.AddString("bind", &options.bind, "Address to listen on.");
  flags.AddString("tls-dir", &options.tls_dir,
                  "Serve HTTPS with the head's TLS files there (and connect to the GCS with TLS).");
  flags.AddInt("port", &port, "Port to listen on.");
  int64_t gcs_lost_timeout_s = absl::ToInt64Seconds(options.gcs_lost_timeout);
  flags.AddInt("gcs-lost-timeout-s", &gcs_lost_timeout_s,
               "Exit (code 3) once the GCS has not answered for this long.");
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "troupe http-server: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  std::ifstream in(token_file);
  std::getline(in, options.token);
  if (options.token.empty()) {
    std::fprintf(stderr, "troupe http-server: no token in --token-file=%s\n", token_file.c_str());
    return 2;
  }
  options.port = static_cast<int>(port);
  // This process is a driver too: its runtime finds the cluster's TLS files here.
  if (!options.tls_dir.empty()) setenv(kTlsDirEnv, options.tls_dir.c_str(), 1);
  if (auto status = UseTlsDir(options.tls_dir); !status.ok()) {
    std::fprintf(stderr, "troupe http-server: --tls-dir: %s\n",
                 std::string(status.message()).c_str());
    return 2;
  }
  if (gcs_lost_timeout_s <= 0) {
    std::fprintf(stderr, "troupe http-server: --gcs-lost-timeout-s must be > 0\n");
    return 2;
  }
  options.gcs_lost_timeout = absl::Seconds(gcs_lost_timeout_s);
  // Blocked in every thread (set before any starts), so only the stopper receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  HttpServer server(options);
  if (absl::Status status = server.Start(); !status.ok()) {
    std::fprintf(stderr, "troupe http-server: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  std::thread([&server, signals] {
    int signal = 0;
    sigwait(&signals, &signal);
    server.Stop();
  }).detach();  // stays in sigwait if Serve returns first; the process is exiting then
  if (absl::Status served = server.Serve(); !served.ok()) {
    std::fprintf(stderr, "troupe http-server: %s\n", std::string(served.message()).c_str());
    std::fflush(stderr);
    _exit(kHttpServerGcsLostExitCode);  // no cluster to leave; skip the runtime's teardown
  }
  return 0;
}

}  // namespace troupe
