// `troupe start --head` and `troupe start --address`: start this node's daemons in the
// background, wait until they are ready, and say how to use them.
#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/cli/commands.h"
#include "src/cli/daemon.h"
#include "src/cli/node_flags.h"
#include "src/common/cluster_target.h"
#include "src/common/flag_parser.h"
#include "src/common/session.h"
#include "src/gcs/health_checker.h"
#include "src/raylet/raylet_options.h"
#include "src/rpc/cluster_token.h"
#include "src/rpc/gcs_client.h"
#include "src/rpc/server.h"

namespace troupe {
namespace {

struct StartOptions {
  bool head = false;
  bool block = false;
  std::string address;
  std::string token;
  std::string node_ip;
  std::string bind;
  std::string temp_dir;
  int64_t port = kDefaultGcsPort;
  int64_t http_port = 8265;
  int64_t raylet_port = 0;
  // Passed on to the daemons; the defaults are theirs (RayletOptions, HealthCheckOptions).
  double memory_usage_threshold = RayletOptions().memory_usage_threshold;
  std::string testing_memory_usage_file;  // testing only; see RayletOptions
  int64_t connect_timeout_s = 10;
  int64_t health_check_period_ms = absl::ToInt64Milliseconds(HealthCheckOptions().period);
  int64_t health_check_timeout_ms = absl::ToInt64Milliseconds(HealthCheckOptions().timeout);
  int64_t health_check_failure_threshold = HealthCheckOptions().failure_threshold;
  int64_t gcs_reconnect_timeout_s = absl::ToInt64Seconds(RayletOptions().gcs_reconnect_timeout);
  NodeFlags node;
};

int Fail(const std::string& message, int code = 1) {
  fprintf(stderr, "troupe start: %s\n", message.c_str());
  return code;
}

// Waits until the GCS at `address` lists `node_id` as ALIVE.
absl::Status NodeIsAlive(GcsClient* gcs, const NodeId& node_id) {
  auto nodes = gcs->GetAllNodeInfo();
  if (!nodes.ok()) return nodes.status();
  for (const auto& node : *nodes) {
    if (node.node_id() == node_id.Binary() && node.state() == rpc::NodeInfo::ALIVE) {
      return absl::OkStatus();
    }
  }
  return absl::UnavailableError("the node has not registered yet");
}

absl::StatusOr<int> StartRaylet(const StartOptions& options, const Session& session,
                                const std::string& gcs_address, const std::string& token,
                                const NodeId& node_id) {
  std::vector<std::string> args = {
      "raylet",
      absl::StrCat("--address=", gcs_address),
      absl::StrCat("--token-file=", session.TokenPath()),
      absl::StrCat("--node-id=", node_id.Hex()),
      absl::StrCat("--node-ip-address=", options.node_ip),
      absl::StrCat("--bind=", options.bind),
      absl::StrCat("--port=", options.raylet_port),
      absl::StrCat("--session-dir=", session.dir()),
      absl::StrCat("--object-store-dir=", ObjectStoreDirOf(session)),
      absl::StrCat("--gcs-reconnect-timeout-s=", options.gcs_reconnect_timeout_s),
      absl::StrCat("--memory-usage-threshold=", options.memory_usage_threshold),
  };
  if (!options.testing_memory_usage_file.empty()) {
    args.push_back(absl::StrCat("--testing-memory-usage-file=", options.testing_memory_usage_file));
  }
  if (options.head) args.push_back("--head");
  for (auto& arg : options.node.ToArgs()) args.push_back(std::move(arg));
  auto pid = SpawnDaemon(args, session.LogPath("raylet"));
  if (!pid.ok()) return pid.status();
  if (auto status = session.RecordDaemon("raylet", *pid); !status.ok()) return status;
  GcsClient gcs(gcs_address, token, absl::Seconds(2));
  if (auto status = WaitUntilReady(*pid, "the raylet", session.LogPath("raylet"), absl::Seconds(20),
                                   [&] { return NodeIsAlive(&gcs, node_id); });
      !status.ok()) {
    kill(*pid, SIGKILL);
    return status;
  }
  return *pid;
}

// The head's HTTP server (jobs API, state, /metrics), run and restarted by `troupe
// head-supervisor` (which records it as "http"); returns its URL once it answers.
absl::StatusOr<std::string> StartHttpServer(const StartOptions& options, const Session& session,
                                            const std::string& gcs_address) {
  auto pid = SpawnDaemon(
      {"head-supervisor", absl::StrCat("--session-dir=", session.dir()),
       absl::StrCat("--gcs-address=", gcs_address), absl::StrCat("--bind=", options.bind),
       absl::StrCat("--http-port=", options.http_port),
       absl::StrCat("--gcs-lost-timeout-s=", options.gcs_reconnect_timeout_s)},
      session.LogPath("head-supervisor"));
  if (!pid.ok()) return pid.status();
  if (auto status = session.RecordDaemon("head-supervisor", *pid); !status.ok()) return status;
  const std::string listen = absl::StrCat(options.bind, ":", options.http_port);
  if (auto status = WaitUntilReady(*pid, "the HTTP server", session.LogPath("http"),
                                   absl::Seconds(20), [&] { return TcpConnectable(listen); });
      !status.ok()) {
    kill(*pid, SIGKILL);  // the HTTP server dies with it (PDEATHSIG)
    return status;
  }
  const std::string url = absl::StrCat("http://", options.node_ip, ":", options.http_port);
  if (auto status = session.WriteFile("http_address", url); !status.ok()) return status;
  return url;
}

// --block: stay in the foreground until a signal, then stop the daemons started here.
int BlockUntilSignal(const Session& session) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  printf("Running in the foreground (--block); Ctrl-C or SIGTERM stops this node.\n");
  fflush(stdout);
  int signal_number = 0;
  while (true) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGCHLD) break;
    int wstatus;
    pid_t pid = waitpid(-1, &wstatus, WNOHANG);
    if (pid > 0) {
      fprintf(stderr, "troupe start: a daemon (pid %d) exited; stopping this node\n", pid);
      break;
    }
  }
  // The HTTP server (a driver) first, with its supervisor before it so it is not restarted;
  // then raylets, so they can unregister from the GCS.
  for (const char* name : {"head-supervisor", "http", "raylet", "gcs"}) {
    for (const auto& daemon : session.LiveDaemons()) {
      if (daemon.name != name) continue;
      kill(daemon.pid, SIGTERM);
      waitpid(daemon.pid, nullptr, 0);
      session.ForgetDaemon(daemon.name);
    }
  }
  return signal_number == SIGCHLD ? 1 : 0;
}

int StartHead(StartOptions& options) {
  if (auto status = CheckPortAvailable(options.bind, static_cast<int>(options.port));
      !status.ok()) {
    return Fail(std::string(status.message()));
  }
  if (options.http_port > 0) {
    if (auto status = CheckPortAvailable(options.bind, static_cast<int>(options.http_port));
        !status.ok()) {
      return Fail(std::string(status.message()) + " (the HTTP port: pick --http-port, or 0)");
    }
  }
  const std::string root = ResolveTempRoot(options.temp_dir);
  auto session = Session::Create(root);
  if (!session.ok()) return Fail(std::string(session.status().message()));
  const ClusterToken token = ClusterToken::Generate(ClusterId::FromRandom());
  const std::string gcs_address = absl::StrCat(options.node_ip, ":", options.port);
  for (auto status :
       {WriteTokenFile(session->TokenPath(), token), session->WriteFile("address", gcs_address),
        session->WriteFile("cluster_id", token.cluster_id().Hex())}) {
    if (!status.ok()) return Fail(std::string(status.message()));
  }

  auto gcs_pid = SpawnDaemon(
      {"gcs-server", absl::StrCat("--port=", options.port), absl::StrCat("--bind=", options.bind),
       absl::StrCat("--token-file=", session->TokenPath()),
       absl::StrCat("--health-check-period-ms=", options.health_check_period_ms),
       absl::StrCat("--health-check-timeout-ms=", options.health_check_timeout_ms),
       absl::StrCat("--health-check-failure-threshold=", options.health_check_failure_threshold)},
      session->LogPath("gcs"));
  if (!gcs_pid.ok()) return Fail(std::string(gcs_pid.status().message()));
  if (auto status = session->RecordDaemon("gcs", *gcs_pid); !status.ok()) {
    return Fail(std::string(status.message()));
  }
  GcsClient gcs(gcs_address, token.ToString(), absl::Seconds(2));
  if (auto status = WaitUntilReady(*gcs_pid, "the GCS", session->LogPath("gcs"), absl::Seconds(20),
                                   [&] {
                                     // Connect by hand first: a gRPC channel that saw "refused"
                                     // backs off for seconds before trying again.
                                     absl::Status port_open = TcpConnectable(gcs_address);
                                     return port_open.ok() ? gcs.GetClusterInfo().status()
                                                           : port_open;
                                   });
      !status.ok()) {
    kill(*gcs_pid, SIGKILL);
    return Fail(std::string(status.message()));
  }
  const NodeId node_id = NodeId::FromRandom();
  auto raylet_pid = StartRaylet(options, *session, gcs_address, token.ToString(), node_id);
  if (!raylet_pid.ok()) {
    kill(*gcs_pid, SIGTERM);
    return Fail(std::string(raylet_pid.status().message()));
  }
  std::string http_address;
  if (options.http_port > 0) {
    auto http = StartHttpServer(options, *session, gcs_address);
    if (!http.ok()) {
      kill(*raylet_pid, SIGTERM);
      kill(*gcs_pid, SIGTERM);
      return Fail(std::string(http.status().message()));
    }
    http_address = *http;
  }
  if (auto status = session->MarkLatest(); !status.ok()) {
    fprintf(stderr, "troupe start: warning: %s\n", std::string(status.message()).c_str());
  }

  printf("Started a Troupe head node (cluster %s).\n", token.cluster_id().Hex().c_str());
  printf("  GCS address:  %s\n", gcs_address.c_str());
  printf("  Node ID:      %s\n", node_id.Hex().c_str());
  if (!http_address.empty()) {
    printf("  HTTP API:     %s (jobs, state, /metrics)\n", http_address.c_str());
  }
  printf("  Session dir:  %s (logs in logs/)\n", session->dir().c_str());
  printf("  Token file:   %s (mode 0600; required by every call)\n\n",
         session->TokenPath().c_str());
  printf("Add a worker node (on another machine, give the token by hand):\n");
  printf("  troupe start --address=%s --token=$(cat %s)\n", gcs_address.c_str(),
         session->TokenPath().c_str());
  printf("Connect a driver program:\n");
  printf("  TROUPE_ADDRESS=%s TROUPE_TOKEN=$(cat %s) ./my_app\n", gcs_address.c_str(),
         session->TokenPath().c_str());
  printf("Check the cluster:   troupe status\n");
  printf("Stop this machine's Troupe processes:   troupe stop\n");
  if (absl::StartsWith(options.bind, "127.")) {
    printf(
        "\nNote: the head listens on %s only. To let other machines join, restart it with "
        "--node-ip-address=<this machine's IP>.\n",
        options.bind.c_str());
  }
  fflush(stdout);
  return options.block ? BlockUntilSignal(*session) : 0;
}

int JoinCluster(StartOptions& options) {
  const std::string root = ResolveTempRoot(options.temp_dir);
  auto target = ResolveClusterTarget(options.address, options.token, root);
  if (!target.ok()) return Fail(std::string(target.status().message()));
  if (options.node_ip.empty()) {
    options.node_ip = LocalAddressToward(target->address.substr(0, target->address.rfind(':')));
    if (options.bind.empty()) options.bind = options.node_ip;
  }

  // Reach the head first (bounded retry), so a wrong address or token fails here, clearly.
  GcsClient gcs(target->address, target->token, absl::Seconds(2));
  const absl::Time deadline = absl::Now() + absl::Seconds(options.connect_timeout_s);
  absl::StatusOr<rpc::GetClusterInfoReply> info;
  while (true) {
    info = gcs.GetClusterInfo();
    if (info.ok() || info.status().code() == absl::StatusCode::kUnauthenticated) break;
    if (absl::Now() > deadline) {
      return Fail(absl::StrCat("cannot reach the head at ", target->address, " after ",
                               options.connect_timeout_s, " s: ", info.status().message(),
                               "\nIs `troupe start --head` running there, is the address right, "
                               "and is the port open from this machine?"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  if (!info.ok()) return Fail(std::string(info.status().message()));

  auto session = Session::Create(root);
  if (!session.ok()) return Fail(std::string(session.status().message()));
  auto token = ClusterToken::Parse(target->token);
  if (!token.ok()) return Fail(std::string(token.status().message()));
  for (auto status : {WriteTokenFile(session->TokenPath(), *token),
                      session->WriteFile("address", target->address),
                      session->WriteFile("cluster_id", BytesToHex(info->cluster_id()))}) {
    if (!status.ok()) return Fail(std::string(status.message()));
  }
  const NodeId node_id = NodeId::FromRandom();
  auto raylet_pid = StartRaylet(options, *session, target->address, target->token, node_id);
  if (!raylet_pid.ok()) return Fail(std::string(raylet_pid.status().message()));
  // Keep session_latest on a head running here, if any, so `troupe status` finds it.
  auto latest = Session::Latest(root);
  if (!latest.ok() || latest->LiveDaemons().empty()) (void)session->MarkLatest();

  printf("Joined the Troupe cluster %s at %s.\n", BytesToHex(info->cluster_id()).c_str(),
         target->address.c_str());
  printf("  Node ID:      %s\n", node_id.Hex().c_str());
  printf("  Node address: %s\n", options.node_ip.c_str());
  printf("  Session dir:  %s (logs in logs/)\n", session->dir().c_str());
  printf("Check the cluster:   troupe status --address=%s\n", target->address.c_str());
  printf("Stop this machine's Troupe processes:   troupe stop\n");
  fflush(stdout);
  return options.block ? BlockUntilSignal(*session) : 0;
}

}  // namespace

int StartCommand(const std::vector<std::string>& args) {
  StartOptions options;
  FlagParser flags("troupe start",
                   "Starts Troupe on this machine: a head node (GCS + raylet) with --head, or a "
                   "worker node (raylet) that joins the head at --address.");
  flags.AddBool("head", &options.head, "Start a new cluster's head node here.");
  flags.AddString("address", &options.address,
                  "host:port of the head to join (port defaults to 6380).");
  flags.AddString("token", &options.token,
                  "Cluster token when joining (default: $TROUPE_TOKEN, or a local session's).");
  flags.AddInt("port", &options.port, "Head: the GCS port.");
  flags.AddInt("http-port", &options.http_port,
               "Head: the HTTP port (jobs REST API, state, /metrics); 0: no HTTP server.");
  flags.AddInt("raylet-port", &options.raylet_port, "The raylet's port (0: any free port).");
  flags.AddDouble("memory-usage-threshold", &options.memory_usage_threshold,
                  "Kill the newest worker when more than this fraction of the machine's memory "
                  "is in use (1: never).");
  flags.AddString("testing-memory-usage-file", &options.testing_memory_usage_file,
                  "Testing only: the raylet reads the memory usage fraction from this file "
                  "instead of /proc/meminfo.");
  flags.AddString("node-ip-address", &options.node_ip,
                  "Address other nodes use to reach this one; daemons also listen on it "
                  "(default: 127.0.0.1 for a head, the address routing to the head when joining).");
  flags.AddString("bind", &options.bind,
                  "Address daemons listen on, e.g. 0.0.0.0 (default: --node-ip-address).");
  flags.AddString("temp-dir", &options.temp_dir,
                  "Root of session directories (default: $TROUPE_TEMP_DIR or /tmp/troupe).");
  flags.AddBool("block", &options.block,
                "Stay in the foreground; stop this node's daemons on Ctrl-C/SIGTERM.");
  flags.AddInt("connect-timeout-s", &options.connect_timeout_s,
               "Joining: how long to keep trying to reach the head.");
  flags.AddInt("health-check-period-ms", &options.health_check_period_ms,
               "Head: how often the GCS probes each raylet.");
  flags.AddInt("health-check-timeout-ms", &options.health_check_timeout_ms,
               "Head: how long a probe may take.");
  flags.AddInt("health-check-failure-threshold", &options.health_check_failure_threshold,
               "Head: failed probes in a row before a node is declared dead.");
  flags.AddInt("gcs-reconnect-timeout-s", &options.gcs_reconnect_timeout_s,
               "A raylet (and, on the head, the HTTP server) exits when the GCS has been "
               "unreachable this long.");
  options.node.Register(&flags);
  flags.SetEpilog(
      "Examples:\n"
      "  troupe start --head --num-cpus=8\n"
      "  troupe start --address=10.0.0.1:6380 --token=$TOKEN --num-gpus=4 "
      "--resources='{\"ssd\": 1}'");
  if (auto status = flags.Parse(args); !status.ok()) return Fail(std::string(status.message()), 2);
  if (flags.help_requested()) {
    printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (!flags.positional().empty()) {
    return Fail(absl::StrCat("unexpected argument '", flags.positional()[0],
                             "' (see `troupe start --help`)"),
                2);
  }
  if (options.head == !options.address.empty()) {
    return Fail(options.head ? "--head and --address cannot be used together: a head starts a new "
                               "cluster, --address joins an existing one"
                             : "say --head to start a new cluster, or --address=HOST:PORT to join "
                               "one (see `troupe start --help`)",
                2);
  }
  if (options.port <= 0 || options.port > 65535) {
    return Fail(absl::StrCat("--port must be between 1 and 65535, got ", options.port), 2);
  }
  if (options.raylet_port < 0 || options.raylet_port > 65535) {
    return Fail(
        absl::StrCat("--raylet-port must be between 0 and 65535, got ", options.raylet_port), 2);
  }
  // Check the node description before starting anything.
  if (auto resources = options.node.BuildResources(); !resources.ok()) {
    return Fail(std::string(resources.status().message()), 2);
  }
  if (auto labels = options.node.BuildLabels(); !labels.ok()) {
    return Fail(std::string(labels.status().message()), 2);
  }
  if (options.head) {
    if (options.node_ip.empty()) options.node_ip = "127.0.0.1";
    if (options.bind.empty()) options.bind = options.node_ip;
    return StartHead(options);
  }
  if (!options.node_ip.empty() && options.bind.empty()) options.bind = options.node_ip;
  return JoinCluster(options);
}

}  // namespace troupe
