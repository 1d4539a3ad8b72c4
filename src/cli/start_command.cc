// `troupe start --head` and `troupe start --address`: start this node's daemons in the
// background, wait until they are ready, and say how to use them.
#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/cli/cluster_tls.h"
#include "src/cli/commands.h"
#include "src/cli/daemon.h"
#include "src/cli/head_token.h"
#include "src/cli/node_flags.h"
#include "src/cli/redis_flags.h"
#include "src/common/cluster_target.h"
#include "src/common/flag_parser.h"
#include "src/common/session.h"
#include "src/gcs/actor_manager.h"
#include "src/gcs/gcs_server.h"
#include "src/gcs/health_checker.h"
#include "src/gcs/task_event_manager.h"
#include "src/raylet/raylet_options.h"
#include "src/rpc/cluster_token.h"
#include "src/rpc/gcs_client.h"
#include "src/rpc/server.h"
#include "src/rpc/transport_security.h"
#include "src/tls/peer_certificates.h"
#include "src/tls/tls_files.h"

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
  std::string tls = "auto";  // head: auto | on | off (see cluster_tls.h)
  std::string ca_cert_hash;  // joining: the head's CA pin, sha256:<hex>
  std::string ca_cert;       // head: the CA to use (with ca_key); joining: the CA to trust
  std::string ca_key;        // head: the CA's private key
  std::string tls_san;       // head: extra names for its certificate, comma-separated
  int64_t port = kDefaultGcsPort;
  int64_t http_port = 8265;
  int64_t raylet_port = 0;
  int64_t object_data_port = 0;
  int64_t metrics_port = RayletOptions().metrics_port;
  // Passed on to the daemons; the defaults are theirs (RayletOptions, HealthCheckOptions).
  double memory_usage_threshold = RayletOptions().memory_usage_threshold;
  std::string testing_memory_usage_file;  // testing only; see RayletOptions
  std::string spill_dir;                  // empty: the raylet's default, <session>/spill
  int64_t connect_timeout_s = 10;
  int64_t health_check_period_ms = absl::ToInt64Milliseconds(HealthCheckOptions().period);
  int64_t max_task_events_per_job = TaskEventManagerOptions().max_tasks_per_job;
  int64_t max_task_events = TaskEventManagerOptions().max_tasks;
  int64_t max_dead_actors = static_cast<int64_t>(ActorManagerOptions().max_dead_actors);
  int64_t kv_quota_bytes = GcsServerOptions().kv.quota_bytes;
  int64_t package_grace_period_s = absl::ToInt64Seconds(GcsServerOptions().packages.grace);
  int64_t health_check_timeout_ms = absl::ToInt64Milliseconds(HealthCheckOptions().timeout);
  int64_t health_check_failure_threshold = HealthCheckOptions().failure_threshold;
  int64_t gcs_reconnect_timeout_s = absl::ToInt64Seconds(RayletOptions().gcs_reconnect_timeout);
  NodeFlags node;
  // Head: where the GCS keeps its state (none: in memory), and the name the cluster is recorded
  // under there ("troupe:cluster:<name>"), for whole-head restarts.
  RedisFlags redis;
  std::string redis_namespace = "default";
  bool redis_start_fresh = false;
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
                                const NodeId& node_id, const std::string& tls_dir) {
  std::vector<std::string> args = {
      "raylet",
      absl::StrCat("--address=", gcs_address),
      absl::StrCat("--token-file=", session.TokenPath()),
      absl::StrCat("--node-id=", node_id.Hex()),
      absl::StrCat("--node-ip-address=", options.node_ip),
      absl::StrCat("--bind=", options.bind),
      absl::StrCat("--port=", options.raylet_port),
      absl::StrCat("--object-data-port=", options.object_data_port),
      absl::StrCat("--metrics-port=", options.metrics_port),
      absl::StrCat("--session-dir=", session.dir()),
      absl::StrCat("--object-store-dir=", ObjectStoreDirOf(session)),
      absl::StrCat("--gcs-reconnect-timeout-s=", options.gcs_reconnect_timeout_s),
      absl::StrCat("--memory-usage-threshold=", options.memory_usage_threshold),
  };
  if (!options.testing_memory_usage_file.empty()) {
    args.push_back(absl::StrCat("--testing-memory-usage-file=", options.testing_memory_usage_file));
  }
  if (!options.spill_dir.empty()) args.push_back(absl::StrCat("--spill-dir=", options.spill_dir));
  if (options.head) args.push_back("--head");
  if (!tls_dir.empty()) args.push_back(absl::StrCat("--tls-dir=", tls_dir));
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

// Starts `troupe head-supervisor` (recorded as "head-supervisor"): it runs and restarts the
// head's HTTP server (jobs API, state, /metrics) when there is an HTTP port, and the GCS when
// `gcs_args` is not empty (with Redis). Returns its pid.
absl::StatusOr<int> StartSupervisor(const StartOptions& options, const Session& session,
                                    const std::string& gcs_address,
                                    const std::vector<std::string>& gcs_args) {
  std::vector<std::string> args = {
      "head-supervisor", absl::StrCat("--session-dir=", session.dir()),
      absl::StrCat("--gcs-address=", gcs_address), absl::StrCat("--bind=", options.bind),
      absl::StrCat("--http-port=", options.http_port),
      absl::StrCat("--gcs-lost-timeout-s=", options.gcs_reconnect_timeout_s)};
  if (!gcs_args.empty()) {
    args.push_back("--");
    args.insert(args.end(), gcs_args.begin(), gcs_args.end());
  }
  auto pid = SpawnDaemon(args, session.LogPath("head-supervisor"));
  if (!pid.ok()) return pid.status();
  if (auto status = session.RecordDaemon("head-supervisor", *pid); !status.ok()) return status;
  return *pid;
}

// Waits until the HTTP server of the supervisor `supervisor_pid` answers; returns its URL.
absl::StatusOr<std::string> WaitForHttpServer(const StartOptions& options, const Session& session,
                                              int supervisor_pid) {
  const std::string listen = absl::StrCat(options.bind, ":", options.http_port);
  if (auto status = WaitUntilReady(supervisor_pid, "the HTTP server", session.LogPath("http"),
                                   absl::Seconds(20), [&] { return TcpConnectable(listen); });
      !status.ok()) {
    return status;
  }
  const bool https = access(NodeCertPath(TlsDirOf(session.dir())).c_str(), R_OK) == 0;
  const std::string url =
      absl::StrCat(https ? "https://" : "http://", options.node_ip, ":", options.http_port);
  if (auto status = session.WriteFile("http_address", url); !status.ok()) return status;
  return url;
}

// Stops what a failed `start` had started in `session`: the supervisor first (so it restarts
// nothing; the HTTP server dies with it, and a GCS it runs exits once told to), then the raylet
// and the GCS; then waits for them all.
void StopStarted(const Session& session) {
  const std::vector<DaemonRecord> started = session.LiveDaemons();
  for (const char* name : {"head-supervisor", "raylet", "gcs"}) {
    for (const auto& daemon : started) {
      if (daemon.name == name) kill(daemon.pid, SIGTERM);
    }
  }
  for (const auto& daemon : started) {
    // Reaps our own children (others are not ours to reap); SIGKILL after 10 s.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    auto running = [&] {
      const pid_t reaped = waitpid(daemon.pid, nullptr, WNOHANG);
      if (reaped == daemon.pid) return false;
      return reaped == 0 || ProcessMatches(daemon.pid, session.dir());
    };
    while (running() && absl::Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (ProcessMatches(daemon.pid, session.dir())) {
      kill(daemon.pid, SIGKILL);
      waitpid(daemon.pid, nullptr, 0);
    }
    session.ForgetDaemon(daemon.name);
  }
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
  // The HTTP server (a driver) first, with its supervisor before it so it is not restarted (one
  // that runs the GCS stops its HTTP server and stays until the GCS exits); then raylets, so
  // they can unregister from the GCS; then the GCS, and the supervisor exits with it.
  // (With Redis the GCS is the supervisor's child, not ours: wait for it through /proc.)
  auto stop = [&](const DaemonRecord& daemon, bool wait_for_exit) {
    kill(daemon.pid, SIGTERM);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    auto running = [&] {
      return waitpid(daemon.pid, nullptr, WNOHANG) == 0 ||
             ProcessMatches(daemon.pid, session.dir());
    };
    auto http_running = [&] {
      for (const auto& other : session.LiveDaemons()) {
        if (other.name == "http") return true;
      }
      return false;
    };
    while (running() && (wait_for_exit || http_running())) {
      if (absl::Now() > deadline) {
        kill(daemon.pid, SIGKILL);
        waitpid(daemon.pid, nullptr, WNOHANG);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  std::vector<DaemonRecord> supervisors;
  for (const char* name : {"head-supervisor", "http", "raylet", "gcs"}) {
    for (const auto& daemon : session.LiveDaemons()) {
      if (daemon.name != name) continue;
      const bool supervisor = daemon.name == "head-supervisor";
      stop(daemon, /*wait_for_exit=*/!supervisor);
      if (supervisor) {
        supervisors.push_back(daemon);
      } else {
        session.ForgetDaemon(daemon.name);
      }
    }
  }
  for (const auto& daemon : supervisors) {
    stop(daemon, /*wait_for_exit=*/true);
    session.ForgetDaemon(daemon.name);
  }
  return signal_number == SIGCHLD ? 1 : 0;
}

// --tls with --ca-cert/--ca-key and --tls-san, checked before anything starts: whether the head
// runs TLS, the CA it was given (read into *given_ca) and the extra certificate names.
absl::StatusOr<bool> ResolveHeadTls(const StartOptions& options,
                                    std::optional<KeyAndCertificate>* given_ca,
                                    std::vector<std::string>* extra_names) {
  if (options.ca_cert.empty() != options.ca_key.empty()) {
    return absl::InvalidArgumentError(
        "--ca-cert and --ca-key go together: a head given its CA needs the certificate and its "
        "key (make both with `troupe tls make-ca --out=DIR`)");
  }
  auto names = ParseExtraNames(options.tls_san);
  if (!names.ok()) return names.status();
  *extra_names = *names;
  if (options.ca_cert.empty()) return ResolveTlsMode(options.tls, options.bind);
  if (options.tls == "off") {
    return absl::InvalidArgumentError("--ca-cert/--ca-key give a CA for TLS, and --tls=off turns "
                                      "TLS off: drop one of them");
  }
  if (!options.ca_cert_hash.empty()) {
    return absl::InvalidArgumentError("--ca-cert-hash is for joining nodes, not a head");
  }
  auto ca = ReadGivenCa(options.ca_cert, options.ca_key);
  if (!ca.ok()) return ca.status();
  *given_ca = *ca;
  return true;  // a CA given means TLS, also on loopback
}

int StartHead(StartOptions& options) {
  std::optional<KeyAndCertificate> given_ca;
  std::vector<std::string> extra_names;
  auto resolved_tls = ResolveHeadTls(options, &given_ca, &extra_names);
  if (!resolved_tls.ok()) return Fail(std::string(resolved_tls.status().message()), 2);
  const bool tls = *resolved_tls;
  if (options.max_dead_actors < 0 || options.max_task_events_per_job < 0 ||
      options.max_task_events < 0) {
    return Fail("--max-dead-actors, --max-task-events-per-job and --max-task-events must be >= 0",
                2);
  }
  if (options.kv_quota_bytes <= 0 || options.package_grace_period_s < 0) {
    return Fail("--kv-quota must be > 0 and --package-grace-period-s >= 0", 2);
  }
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
  // With Redis: check it first (a wrong address or password fails here, at once), then find out
  // whether this starts a new cluster or restarts the one recorded there.
  std::optional<ClusterToken> redis_token;
  bool restart = false;
  if (options.redis.enabled()) {
    auto redis = options.redis.ToOptions("");
    if (!redis.ok()) return Fail(std::string(redis.status().message()));
    if (auto status = CheckRedis(*redis); !status.ok()) {
      return Fail(absl::StrCat("cannot use Redis at ", options.redis.address, ": ",
                               status.message()));
    }
    auto token = ClusterTokenFromRedis(options.token, options.redis_namespace, *redis, root,
                                       options.redis_start_fresh, &restart);
    if (!token.ok()) return Fail(std::string(token.status().message()));
    redis_token = *token;
  }
  const absl::StatusOr<ClusterToken> cluster_token =
      redis_token ? absl::StatusOr<ClusterToken>(*redis_token) : NewClusterToken(options.token);
  if (!cluster_token.ok()) return Fail(std::string(cluster_token.status().message()), 2);
  const ClusterToken token = *cluster_token;
  auto session = Session::Create(root);
  if (!session.ok()) return Fail(std::string(session.status().message()));
  const std::string gcs_address = absl::StrCat(options.node_ip, ":", options.port);
  for (auto status :
       {WriteTokenFile(session->TokenPath(), token), session->WriteFile("address", gcs_address),
        session->WriteFile("cluster_id", token.cluster_id().Hex())}) {
    if (!status.ok()) return Fail(std::string(status.message()));
  }
  std::string tls_dir, ca_pin;
  if (tls) {
    std::vector<std::string> names = CertificateNames(options.node_ip, options.bind);
    names.insert(names.end(), extra_names.begin(), extra_names.end());
    auto pin = SetUpHeadTls(*session, root, token.cluster_id().Hex(), names, given_ca);
    if (!pin.ok()) return Fail(absl::StrCat("cannot set up TLS: ", pin.status().message()));
    ca_pin = *pin;
    tls_dir = TlsDirOf(session->dir());
  } else if (!IsLoopbackAddress(options.bind)) {
    fprintf(stderr,
            "\n*** WARNING: TLS is OFF (--tls=off) while the head listens on %s, beyond "
            "loopback. ***\n*** The cluster token and all data cross the network in plain "
            "text: anyone on the path can read the token and run code on this cluster. ***\n\n",
            options.bind.c_str());
  }
  if (auto status = UseTlsDir(tls_dir); !status.ok()) return Fail(std::string(status.message()));
  const std::string join_command = JoinCommand(gcs_address, token.ToString(), ca_pin);
  // Mode 0600: it holds the token.
  if (auto status = WriteFileWithMode(session->dir() + "/join_command", join_command + "\n", 0600);
      !status.ok()) {
    return Fail(std::string(status.message()));
  }
  if (options.redis.enabled()) {
    // For `troupe status` (an unreachable GCS is being restarted), and so that a later `start`
    // notices a Redis that lost this cluster (ClusterTokenFromRedis).
    for (auto status : {session->WriteFile("redis_address", options.redis.address),
                        session->WriteFile("redis_namespace", options.redis_namespace)}) {
      if (!status.ok()) return Fail(std::string(status.message()));
    }
  }

  std::vector<std::string> gcs_args = {
      "gcs-server",
      absl::StrCat("--port=", options.port),
      absl::StrCat("--bind=", options.bind),
      absl::StrCat("--token-file=", session->TokenPath()),
      absl::StrCat("--health-check-period-ms=", options.health_check_period_ms),
      absl::StrCat("--health-check-timeout-ms=", options.health_check_timeout_ms),
      absl::StrCat("--health-check-failure-threshold=", options.health_check_failure_threshold),
      absl::StrCat("--max-task-events-per-job=", options.max_task_events_per_job),
      absl::StrCat("--max-task-events=", options.max_task_events),
      absl::StrCat("--max-dead-actors=", options.max_dead_actors),
      absl::StrCat("--kv-quota=", options.kv_quota_bytes),
      absl::StrCat("--package-grace-period-s=", options.package_grace_period_s)};
  if (!tls_dir.empty()) gcs_args.push_back(absl::StrCat("--tls-dir=", tls_dir));
  for (auto& arg : options.redis.ToArgs()) gcs_args.push_back(std::move(arg));
  // Without Redis the GCS runs on its own (a restarted one would have lost the cluster's state);
  // with Redis the head supervisor runs it and restarts it when it dies.
  int supervisor_pid = 0;
  absl::StatusOr<int> gcs_pid = 0;
  if (options.redis.enabled()) {
    auto pid = StartSupervisor(options, *session, gcs_address, gcs_args);
    if (!pid.ok()) return Fail(std::string(pid.status().message()));
    supervisor_pid = *pid;
  } else {
    gcs_pid = SpawnDaemon(std::vector<std::string>(gcs_args.begin(), gcs_args.end()),
                          session->LogPath("gcs"));
    if (!gcs_pid.ok()) return Fail(std::string(gcs_pid.status().message()));
    if (auto status = session->RecordDaemon("gcs", *gcs_pid); !status.ok()) {
      return Fail(std::string(status.message()));
    }
  }
  GcsClient gcs(gcs_address, token.ToString(), absl::Seconds(2));
  if (auto status = WaitUntilReady(supervisor_pid > 0 ? supervisor_pid : *gcs_pid, "the GCS",
                                   session->LogPath("gcs"), absl::Seconds(20),
                                   [&] {
                                     // Connect by hand first: a gRPC channel that saw "refused"
                                     // backs off for seconds before trying again.
                                     absl::Status port_open = TcpConnectable(gcs_address);
                                     return port_open.ok() ? gcs.GetClusterInfo().status()
                                                           : port_open;
                                   });
      !status.ok()) {
    StopStarted(*session);
    return Fail(std::string(status.message()));
  }
  // A new node ID also when the cluster restarts: the old head node is declared dead by the
  // health checks, and this one joins as a new node.
  const NodeId node_id = NodeId::FromRandom();
  auto raylet_pid = StartRaylet(options, *session, gcs_address, token.ToString(), node_id, tls_dir);
  if (!raylet_pid.ok()) {
    StopStarted(*session);
    return Fail(std::string(raylet_pid.status().message()));
  }
  std::string http_address;
  if (options.http_port > 0) {
    if (supervisor_pid == 0) {
      auto pid = StartSupervisor(options, *session, gcs_address, {});
      if (!pid.ok()) {
        StopStarted(*session);
        return Fail(std::string(pid.status().message()));
      }
      supervisor_pid = *pid;
    }
    auto http = WaitForHttpServer(options, *session, supervisor_pid);
    if (!http.ok()) {
      StopStarted(*session);
      return Fail(std::string(http.status().message()));
    }
    http_address = *http;
  }
  if (auto status = session->MarkLatest(); !status.ok()) {
    fprintf(stderr, "troupe start: warning: %s\n", std::string(status.message()).c_str());
  }

  if (restart) {
    printf("Restarted the head node of Troupe cluster %s (its state is in Redis at %s, namespace "
           "%s; the cluster's token is unchanged).\n",
           token.cluster_id().Hex().c_str(), options.redis.address.c_str(),
           options.redis_namespace.c_str());
  } else {
    printf("Started a Troupe head node (cluster %s).\n", token.cluster_id().Hex().c_str());
  }
  printf("  GCS address:  %s\n", gcs_address.c_str());
  if (options.redis.enabled()) {
    printf("  GCS state:    Redis at %s (namespace %s); the head supervisor restarts the GCS "
           "if it dies\n",
           options.redis.address.c_str(), options.redis_namespace.c_str());
  }
  printf("  Node ID:      %s\n", node_id.Hex().c_str());
  if (!http_address.empty()) {
    printf("  HTTP API:     %s (jobs, state, /metrics; the dashboard at /)\n", http_address.c_str());
  }
  printf("  Session dir:  %s (logs in logs/)\n", session->dir().c_str());
  printf("  Token file:   %s (mode 0600; required by every call)\n", session->TokenPath().c_str());
  if (!tls_dir.empty()) {
    printf("  TLS:          on; cluster CA %s (pin %s%s)\n", CaCertPath(tls_dir).c_str(),
           ca_pin.c_str(), given_ca ? absl::StrCat(", from ", options.ca_cert).c_str() : "");
  } else {
    printf("  TLS:          off%s\n", IsLoopbackAddress(options.bind)
                                          ? " (loopback only; --tls=on to use it anyway)"
                                          : " (--tls=off: EVERYTHING IS PLAIN TEXT)");
  }
  printf("\nAdd a worker node: run this on it (also in %s/join_command, mode 0600):\n",
         session->dir().c_str());
  printf("  %s\n", join_command.c_str());
  printf("Connect a driver program on any node of the cluster:\n");
  printf("  TROUPE_ADDRESS=auto ./my_app\n");
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

// With --ca-cert: that CA (and --ca-cert-hash, if given, must be its pin), once the head presents
// a certificate it issued (retried until `deadline` while the head does not answer; another CA
// fails at once).
absl::StatusOr<std::string> GivenHeadCa(const StartOptions& options, const ClusterTarget& target,
                                        absl::Time deadline) {
  auto ca = ReadTrustedCa(options.ca_cert, options.ca_cert_hash);
  if (!ca.ok()) return ca.status();
  while (true) {
    auto chain = FetchPeerCertificates(target.address, absl::Seconds(2));
    if (chain.ok()) {
      if (auto status = CheckIssuedBy(*chain, *ca, "--ca-cert=" + options.ca_cert, target.address);
          !status.ok()) {
        return status;
      }
      return *ca;
    }
    if (chain.status().code() != absl::StatusCode::kUnavailable || absl::Now() > deadline) {
      return chain.status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

// The CA a joining node trusts ("" for a plaintext head). With --ca-cert: GivenHeadCa. With
// --ca-cert-hash: the CA the head presents, if its pin matches (retried until `deadline` while
// the head does not answer; a mismatch fails at once). Without: a local session's CA of this
// cluster, else none, but a head that answers TLS is then refused with what to add.
absl::StatusOr<std::string> HeadCa(const StartOptions& options, const ClusterTarget& target,
                                   absl::Time deadline) {
  if (!options.ca_cert.empty()) return GivenHeadCa(options, target, deadline);
  if (!options.ca_cert_hash.empty()) {
    while (true) {
      auto ca = DiscoverPinnedCa(target.address, options.ca_cert_hash, absl::Seconds(2));
      if (ca.ok() || ca.status().code() != absl::StatusCode::kUnavailable ||
          absl::Now() > deadline) {
        return ca;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  }
  if (!target.tls_dir.empty()) return ReadWholeFile(CaCertPath(target.tls_dir));
  if (FetchPeerCertificates(target.address, absl::Seconds(2)).ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the head at ", target.address,
        " serves TLS: join with --ca-cert-hash=sha256:... to "
        "pin its CA (the head printed the whole command; it is in its <session>/join_command), "
        "or with --ca-cert=FILE, the CA certificate the head was started with"));
  }
  return std::string();
}

int JoinCluster(StartOptions& options) {
  const std::string root = ResolveTempRoot(options.temp_dir);
  auto target = ResolveClusterTarget(options.address, options.token, root);
  if (!target.ok()) return Fail(std::string(target.status().message()));
  if (options.node_ip.empty()) {
    options.node_ip = LocalAddressToward(target->address.substr(0, target->address.rfind(':')));
    if (options.bind.empty()) options.bind = options.node_ip;
  }

  const absl::Time deadline = absl::Now() + absl::Seconds(options.connect_timeout_s);
  // Whom to trust: the CA the head presents if it matches --ca-cert-hash, else the CA of a local
  // session of this cluster (a node started on the head's machine), else none (plaintext head).
  auto ca_pem = HeadCa(options, *target, deadline);
  if (!ca_pem.ok()) {
    return Fail(std::string(ca_pem.status().message()),
                ca_pem.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
  }
  if (ca_pem->empty()) {
    SetTransportSecurity(std::nullopt);
  } else {
    SetTransportSecurity(TlsMaterial{*ca_pem, "", ""});
  }
  // Reach the head first (bounded retry), so a wrong address or token fails here, clearly.
  GcsClient gcs(target->address, target->token, absl::Seconds(2));
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
  std::string tls_dir;
  if (!ca_pem->empty()) {
    if (auto status =
            SetUpNodeTls(*session, *ca_pem, &gcs, CertificateNames(options.node_ip, options.bind),
                         absl::StrCat("troupe-node-", node_id.Hex().substr(0, 12)));
        !status.ok()) {
      return Fail(std::string(status.message()));
    }
    tls_dir = TlsDirOf(session->dir());
  }
  auto raylet_pid =
      StartRaylet(options, *session, target->address, target->token, node_id, tls_dir);
  if (!raylet_pid.ok()) return Fail(std::string(raylet_pid.status().message()));
  // Keep session_latest on a head running here, if any, so `troupe status` finds it.
  auto latest = Session::Latest(root);
  if (!latest.ok() || latest->LiveDaemons().empty()) (void)session->MarkLatest();

  printf("Joined the Troupe cluster %s at %s.\n", BytesToHex(info->cluster_id()).c_str(),
         target->address.c_str());
  printf("  Node ID:      %s\n", node_id.Hex().c_str());
  printf("  Node address: %s\n", options.node_ip.c_str());
  printf("  TLS:          %s\n", tls_dir.empty() ? "off (the head runs without TLS)"
                                                 : "on (node certificate issued by the head)");
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
                  "Cluster token when joining (default: $TROUPE_TOKEN, or a local session's). Head: "
                  "the new cluster's token (default: a random one), or the token of the cluster "
                  "recorded in Redis that it restarts (default: $TROUPE_TOKEN, or a local "
                  "session's).");
  flags.AddInt("port", &options.port, "Head: the GCS port.");
  flags.AddInt("http-port", &options.http_port,
               "Head: the HTTP port (jobs REST API, state, /metrics); 0: no HTTP server.");
  flags.AddInt("raylet-port", &options.raylet_port, "The raylet's port (0: any free port).");
  flags.AddInt("object-data-port", &options.object_data_port,
               "The raylet's object data port, where other nodes read object bytes (0: any free "
               "port).");
  flags.AddInt("metrics-port", &options.metrics_port,
               "Where this node serves Prometheus /metrics with its workers' user metrics (token "
               "required; HTTPS under TLS): 0 any free port (`troupe status` shows it), -1 none. "
               "The head lists every node's at /api/v0/prometheus_targets.");
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
  flags.AddString("tls", &options.tls,
                  "Head: auto (TLS unless the head binds loopback only), on, or off (plain text "
                  "beyond loopback: loudly warned). Joining nodes follow the head.");
  flags.AddString("ca-cert-hash", &options.ca_cert_hash,
                  "Joining a TLS cluster: the head's CA pin, sha256:<hex> (printed by the head "
                  "and in its <session>/join_command); a head presenting another CA is refused.");
  flags.AddString("ca-cert", &options.ca_cert,
                  "PEM CA certificate (e.g. ca.crt of `troupe tls make-ca`, from a Kubernetes "
                  "Secret). Head (with --ca-key): the cluster CA, instead of a new one; TLS is on. "
                  "Joining: trust exactly this CA (no pin needed; with --ca-cert-hash both must "
                  "agree).");
  flags.AddString("ca-key", &options.ca_key,
                  "Head: the private key of --ca-cert (PEM; not readable by other users). The "
                  "head issues its own certificate and the nodes' with it.");
  flags.AddString("tls-san", &options.tls_san,
                  "Head: more names for its certificate, comma-separated (host names or IPs "
                  "nodes use to reach it, e.g. a Kubernetes Service: troupe-head).");
  flags.AddString("spill-dir", &options.spill_dir,
                  "Where this node's full object store spills objects to disk (default: "
                  "<session dir>/spill); put it on a disk with room.");
  flags.AddString("temp-dir", &options.temp_dir,
                  "Root of session directories (default: $TROUPE_TEMP_DIR or /tmp/troupe).");
  flags.AddBool("block", &options.block,
                "Stay in the foreground; stop this node's daemons on Ctrl-C/SIGTERM.");
  flags.AddInt("connect-timeout-s", &options.connect_timeout_s,
               "Joining: how long to keep trying to reach the head.");
  flags.AddInt("health-check-period-ms", &options.health_check_period_ms,
               "Head: how often the GCS probes each raylet.");
  flags.AddInt("max-task-events-per-job", &options.max_task_events_per_job,
               "Head: task attempts the GCS remembers per job (task API, timeline).");
  flags.AddInt("max-task-events", &options.max_task_events,
               "Head: task attempts the GCS remembers in all jobs together.");
  flags.AddInt("max-dead-actors", &options.max_dead_actors,
               "Head: dead actors the GCS remembers (troupe list actors, late callers).");
  flags.AddBytes("kv-quota", &options.kv_quota_bytes,
                 "Head: bytes the GCS key-value store may hold in all (uploaded packages, "
                 "driver executables, job logs, user keys); a write past it is refused.");
  flags.AddInt("package-grace-period-s", &options.package_grace_period_s,
               "Head: seconds an uploaded working-directory package or driver executable stays "
               "in the GCS after no running or recent job refers to it.");
  flags.AddInt("health-check-timeout-ms", &options.health_check_timeout_ms,
               "Head: how long a probe may take.");
  flags.AddInt("health-check-failure-threshold", &options.health_check_failure_threshold,
               "Head: failed probes in a row before a node is declared dead.");
  flags.AddInt("gcs-reconnect-timeout-s", &options.gcs_reconnect_timeout_s,
               "A raylet (and, on the head, the HTTP server) exits when the GCS has been "
               "unreachable this long.");
  options.redis.Register(&flags);
  flags.AddString("redis-namespace", &options.redis_namespace,
                  "Head with Redis: the name this cluster is recorded under in Redis; a head "
                  "started again with the same Redis and namespace restarts that cluster.");
  flags.AddBool("redis-start-fresh", &options.redis_start_fresh,
                "Head with Redis: start a new, empty cluster even though a head on this machine "
                "ran one with this Redis and namespace that Redis no longer holds (Redis lost "
                "its data). Without it, `start` refuses rather than silently losing that "
                "cluster's actors, jobs and KV.");
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
  if (options.object_data_port < 0 || options.object_data_port > 65535) {
    return Fail(absl::StrCat("--object-data-port must be between 0 and 65535, got ",
                             options.object_data_port),
                2);
  }
  if (options.metrics_port < -1 || options.metrics_port > 65535) {
    return Fail(absl::StrCat("--metrics-port must be between 0 and 65535 (0: any free port), or -1 "
                             "for none; got ",
                             options.metrics_port),
                2);
  }
  if (auto status = options.redis.Resolve(/*address_from_env=*/options.head); !status.ok()) {
    return Fail(std::string(status.message()), 2);
  }
  if (!options.head && options.redis.enabled()) {
    return Fail("--redis-address is for the head (`troupe start --head`): worker nodes reach "
                "the GCS, never Redis",
                2);
  }
  if (options.redis_namespace.empty()) return Fail("--redis-namespace must not be empty", 2);
  if (options.redis_start_fresh && !options.redis.enabled()) {
    return Fail("--redis-start-fresh is for a head with --redis-address", 2);
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
  if (!options.ca_key.empty()) {
    return Fail("--ca-key is for the head: a joining node needs only --ca-cert (the CA's key "
                "stays on the head)",
                2);
  }
  if (!options.tls_san.empty()) return Fail("--tls-san is for the head", 2);
  if (options.ca_cert_hash.empty() && std::getenv("TROUPE_CA_CERT_HASH") != nullptr) {
    options.ca_cert_hash = std::getenv("TROUPE_CA_CERT_HASH");
  }
  // A bad --ca-cert (or one its --ca-cert-hash does not match) is a usage error: say so first.
  if (!options.ca_cert.empty()) {
    if (auto ca = ReadTrustedCa(options.ca_cert, options.ca_cert_hash); !ca.ok()) {
      return Fail(std::string(ca.status().message()), 2);
    }
  }
  return JoinCluster(options);
}

}  // namespace troupe
