// `troupe raylet`: parses the raylet's flags into RayletOptions and runs a Raylet in the
// foreground until SIGTERM/SIGINT (`troupe start` runs it as a daemon). The composition root of
// a daemon raylet; flag defaults come from RayletOptions.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "src/cli/commands.h"
#include "src/cli/node_flags.h"
#include "src/common/flag_parser.h"
#include "src/common/logging.h"
#include "src/raylet/raylet.h"
#include "src/rpc/cluster_token.h"
#include "src/rpc/transport_security.h"

namespace troupe {

int RayletCommand(const std::vector<std::string>& args) {
  RayletOptions options;
  NodeFlags node_flags;
  std::string token_file, node_id_hex, bind;
  int64_t port = options.port;
  int64_t object_data_port = options.object_data_port;
  int64_t metrics_port = options.metrics_port;
  int64_t report_period_ms = absl::ToInt64Milliseconds(options.report_period);
  int64_t reconnect_timeout_s = absl::ToInt64Seconds(options.gcs_reconnect_timeout);
  bool head = false;
  FlagParser flags("troupe raylet",
                   "Runs a raylet in the foreground (`troupe start` runs it for you).");
  flags.AddString("address", &options.gcs_address, "host:port of the head's GCS (required).");
  flags.AddString("token-file", &token_file, "File holding the cluster token (required).");
  flags.AddString("tls-dir", &options.tls_dir,
                  "Serve and connect with TLS using this node's files there (ca.pem, node.pem, "
                  "node.key); workers get it too. Empty: plaintext.");
  flags.AddString("node-id", &node_id_hex, "This node's ID in hex (default: random).");
  flags.AddString("node-ip-address", &options.node_ip,
                  "Address other nodes use to reach this one.");
  flags.AddString("bind", &bind, "Address to listen on (default: --node-ip-address).");
  flags.AddInt("port", &port, "Port to listen on (0: any free port).");
  flags.AddInt("object-data-port", &object_data_port,
               "Port where other nodes read object bytes, on the --bind address (0: any free "
               "port). TLS whenever --tls-dir is given.");
  flags.AddInt("metrics-port", &metrics_port,
               "Port of this node's Prometheus /metrics (user metrics of its workers; token "
               "required), on the --bind address: 0 any free port (shown by `troupe status`), -1 "
               "none. HTTPS whenever --tls-dir is given.");
  flags.AddBool("head", &head, "This is the head node.");
  flags.AddString(
      "session-dir", &options.session_dir,
      "Session directory: worker logs go to its logs/ (default: /tmp/troupe/raylet-<node id>).");
  flags.AddString(
      "object-store-dir", &options.object_store_dir,
      "Shared-memory directory of the object store (default: /dev/shm/troupe-<node id>).");
  flags.AddDouble("memory-usage-threshold", &options.memory_usage_threshold,
                  "Fraction of the machine's memory in use above which the newest worker is "
                  "killed (1: never).");
  flags.AddString("testing-memory-usage-file", &options.testing_memory_usage_file,
                  "Testing only: read the memory usage fraction from this file instead of "
                  "/proc/meminfo.");
  flags.AddString("spill-dir", &options.spill_dir,
                  "Where full object stores spill objects (default: <session dir>/spill).");
  flags.AddInt("report-period-ms", &report_period_ms, "How often resources are reported.");
  flags.AddInt("gcs-reconnect-timeout-s", &reconnect_timeout_s,
               "Exit when the head has been unreachable this long.");
  node_flags.Register(&flags);
  auto fail = [](const std::string& message) {
    fprintf(stderr, "troupe raylet: %s\n", message.c_str());
    return 2;
  };
  if (auto status = flags.Parse(args); !status.ok()) return fail(std::string(status.message()));
  if (flags.help_requested()) {
    printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (options.gcs_address.empty()) return fail("--address is required");
  auto token = ReadTokenFile(token_file);
  if (!token.ok()) return fail(std::string(token.status().message()) + " (pass --token-file)");
  options.token = token->ToString();
  if (auto status = UseTlsDir(options.tls_dir); !status.ok()) {
    return fail("--tls-dir: " + std::string(status.message()));
  }
  if (!node_id_hex.empty()) {
    auto node_id = NodeId::FromHex(node_id_hex);
    if (!node_id.ok()) return fail("--node-id: " + std::string(node_id.status().message()));
    options.node_id = *node_id;
  }
  std::string gpu_note;
  auto resources = node_flags.BuildResources(&gpu_note);
  if (!resources.ok()) return fail(std::string(resources.status().message()));
  if (!gpu_note.empty()) TROUPE_LOG(Info) << gpu_note;
  auto labels = node_flags.BuildLabels();
  if (!labels.ok()) return fail(std::string(labels.status().message()));
  options.resources = *resources;
  options.labels = *labels;
  // Transfer tuning and the testing delay come from the environment (see RayletOptions).
  auto env_int = [](const char* name) -> int64_t {
    const char* value = std::getenv(name);
    return value == nullptr ? 0 : std::strtoll(value, nullptr, 10);
  };
  options.object_transfer_streams = static_cast<int>(env_int("TROUPE_OBJECT_STREAMS"));
  options.object_chunk_bytes = env_int("TROUPE_OBJECT_CHUNK_BYTES");
  if (const char* pulls = std::getenv("TROUPE_OBJECT_DATA_PORT_PULLS"); pulls != nullptr) {
    options.object_data_port_pulls = std::string(pulls) != "0";
  }
  options.testing_object_serve_chunk_delay =
      absl::Milliseconds(env_int("TROUPE_TESTING_OBJECT_SERVE_DELAY_MS"));
  // Object transfers receive megabytes per message into buffers gRPC mallocs and frees: glibc
  // would hand each one back to the kernel (munmap or trim) and fault fresh zeroed pages in for
  // the next, a third of a transfer's CPU (docs/benchmarks_history.md). Keep up to 128 MiB of freed
  // heap for reuse instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  options.mask_gpus = node_flags.gpu_visibility == "assigned";
  options.bind_address = bind.empty() ? options.node_ip : bind;
  options.port = static_cast<int>(port);
  options.object_data_port = static_cast<int>(object_data_port);
  if (metrics_port < -1 || metrics_port > 65535) {
    return fail("--metrics-port must be a port number, 0 (any free port) or -1 (none)");
  }
  options.metrics_port = static_cast<int>(metrics_port);
  options.is_head = head;
  options.report_period = absl::Milliseconds(report_period_ms);
  options.gcs_reconnect_timeout = absl::Seconds(reconnect_timeout_s);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Raylet raylet(options);
  if (auto status = raylet.Start(); !status.ok()) {
    TROUPE_LOG(Error) << "raylet failed to start: " << status.message();
    return 1;
  }
  std::thread([&raylet, signals] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    raylet.RequestStop(absl::StrCat("raylet received signal ", signal_number, " (troupe stop)"));
  }).detach();
  absl::Status result = raylet.Run();
  if (!result.ok()) {
    TROUPE_LOG(Error) << "raylet exiting: " << result.message();
    return 1;
  }
  TROUPE_LOG(Info) << "raylet stopped";
  return 0;
}

}  // namespace troupe
