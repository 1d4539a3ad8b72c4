// `troupe gcs-server ...`: parses the GCS's flags into GcsServerOptions and runs a GcsServer in
// the foreground until SIGTERM/SIGINT. `troupe start --head` runs this for you (with Redis, under
// the head supervisor, which restarts it when it dies).
//
// Its store: in memory by default (the state dies with the process), or with --redis-address a
// RedisStoreClient under "troupe:<cluster id hex>", so a restarted GCS finds the cluster's
// tables again. Redis unreachable at start is retried for --redis-give-up-s; Redis gone for that
// long while running makes the GCS log why and exit with kGcsStoreLostExitCode.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/cli/commands.h"
#include "src/cli/redis_flags.h"
#include "src/common/flag_parser.h"
#include "src/common/logging.h"
#include "src/gcs/gcs_server.h"
#include "src/gcs/in_memory_store_client.h"
#include "src/rpc/cluster_token.h"
#include "src/rpc/transport_security.h"
#include "src/tls/tls_files.h"

namespace troupe {
namespace {

// Connects to Redis, retrying for up to give_up_after: a GCS restarted while Redis restarts
// too waits for it instead of failing at once. Wrong credentials fail at once.
absl::StatusOr<std::unique_ptr<RedisStoreClient>> ConnectToRedis(const RedisOptions& options) {
  const absl::Time give_up_at = absl::Now() + options.give_up_after;
  absl::Duration backoff = absl::Milliseconds(100);
  bool logged = false;
  while (true) {
    auto store = RedisStoreClient::Connect(options);
    if (store.ok() || store.status().code() != absl::StatusCode::kUnavailable ||
        absl::Now() + backoff > give_up_at) {
      return store;
    }
    if (!logged) {
      TROUPE_LOG(Warning) << "cannot reach Redis at " << options.address << " ("
                          << store.status().message() << "); retrying for up to "
                          << absl::FormatDuration(options.give_up_after);
      logged = true;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

}  // namespace

int GcsServerCommand(const std::vector<std::string>& args) {
  GcsServerOptions options;  // the defaults
  std::string token_file;
  std::string tls_dir;
  int64_t port = options.port;
  int64_t period_ms = absl::ToInt64Milliseconds(options.health_check.period);
  int64_t timeout_ms = absl::ToInt64Milliseconds(options.health_check.timeout);
  int64_t threshold = options.health_check.failure_threshold;
  int64_t max_task_events = options.task_events.max_tasks_per_job;
  int64_t max_task_events_total = options.task_events.max_tasks;
  int64_t max_dead_actors = static_cast<int64_t>(options.actors.max_dead_actors);
  int64_t kv_quota = options.kv.quota_bytes;
  int64_t package_grace_s = absl::ToInt64Seconds(options.packages.grace);
  RedisFlags redis;
  FlagParser flags("troupe gcs-server",
                   "Runs the global control store in the foreground (`troupe start --head` runs "
                   "it for you).");
  flags.AddInt("port", &port, "Port to listen on (0: any free port).");
  flags.AddString("bind", &options.bind_address, "Address to listen on.");
  flags.AddString("token-file", &token_file, "File holding the cluster token (required).");
  flags.AddString("tls-dir", &tls_dir,
                  "Serve TLS with the head's files there (ca.pem, ca.key, node.pem, node.key); "
                  "empty: plaintext.");
  flags.AddInt("health-check-period-ms", &period_ms, "How often each raylet is probed.");
  flags.AddInt("health-check-timeout-ms", &timeout_ms, "How long a probe may take.");
  flags.AddInt("health-check-failure-threshold", &threshold,
               "Failed probes in a row before a node is declared dead.");
  flags.AddInt("max-task-events-per-job", &max_task_events,
               "Task attempts remembered per job for the task API and timeline; the oldest are "
               "forgotten (and counted) beyond it.");
  flags.AddInt("max-task-events", &max_task_events_total,
               "Task attempts remembered in all jobs together (finished jobs' too); the oldest "
               "are forgotten (and counted for their job) beyond it.");
  flags.AddInt("max-dead-actors", &max_dead_actors,
               "Dead actors remembered (troupe list actors, late callers); the oldest deaths are "
               "forgotten beyond it.");
  flags.AddBytes("kv-quota", &kv_quota,
                 "Bytes the key-value store may hold in all (keys and values); a write past it "
                 "fails RESOURCE_EXHAUSTED.");
  flags.AddInt("package-grace-period-s", &package_grace_s,
               "Seconds an uploaded package or driver executable stays after no running or "
               "recent job refers to it.");
  redis.Register(&flags);
  if (auto status = flags.Parse(args); !status.ok()) {
    fprintf(stderr, "troupe gcs-server: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (max_dead_actors < 0 || max_task_events < 0 || max_task_events_total < 0) {
    fprintf(stderr,
            "troupe gcs-server: --max-dead-actors, --max-task-events-per-job and "
            "--max-task-events must be >= 0\n");
    return 2;
  }
  if (kv_quota <= 0 || package_grace_s < 0) {
    fprintf(stderr,
            "troupe gcs-server: --kv-quota must be > 0 and --package-grace-period-s >= 0\n");
    return 2;
  }
  if (period_ms <= 0 || timeout_ms <= 0 || threshold <= 0) {
    fprintf(stderr, "troupe gcs-server: health check period, timeout and threshold must be > 0\n");
    return 2;
  }
  if (auto status = redis.Resolve(/*address_from_env=*/false); !status.ok()) {
    fprintf(stderr, "troupe gcs-server: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  auto token = ReadTokenFile(token_file);
  if (!token.ok()) {
    fprintf(stderr, "troupe gcs-server: %s (pass --token-file)\n",
            std::string(token.status().message()).c_str());
    return 2;
  }
  options.token = *token;
  if (!tls_dir.empty()) {
    auto ca = ReadCaFiles(tls_dir);
    absl::Status status = ca.ok() ? UseTlsDir(tls_dir) : ca.status();
    if (!status.ok()) {
      fprintf(stderr, "troupe gcs-server: --tls-dir: %s\n", std::string(status.message()).c_str());
      return 2;
    }
    options.certificate_authority = *ca;
  }
  options.port = static_cast<int>(port);
  options.task_events.max_tasks_per_job = max_task_events;
  options.task_events.max_tasks = max_task_events_total;
  options.actors.max_dead_actors = static_cast<size_t>(max_dead_actors);
  options.kv.quota_bytes = kv_quota;
  options.packages.grace = absl::Seconds(package_grace_s);
  options.health_check = {absl::Milliseconds(period_ms), absl::Milliseconds(timeout_ms),
                          static_cast<int>(threshold)};

  // Fixed malloc thresholds: by default glibc raises its mmap threshold to the largest block
  // ever freed (a driver's executable in the KV: megabytes) and its trim threshold to twice
  // that, after which megabytes of freed memory stay in the arenas for good. With them fixed, a
  // block of 1 MiB or more is mapped and unmapped on its own, and an arena's free top past
  // 512 KiB goes back at once. The timer's IdleMemoryTrimmer returns the rest after a burst.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 10);

  // Block termination signals before gRPC starts threads, then wait for them here.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::unique_ptr<StoreClient> store;
  if (redis.enabled()) {
    auto redis_options = redis.ToOptions(RedisKeyPrefix(token->cluster_id().Hex()));
    if (!redis_options.ok()) {
      fprintf(stderr, "troupe gcs-server: %s\n",
              std::string(redis_options.status().message()).c_str());
      return 2;
    }
    const std::string redis_address = redis.address;
    redis_options->on_fatal = [redis_address](const absl::Status& status) {
      // The GCS cannot keep its state: stop rather than diverge from Redis. The head supervisor
      // does not restart a GCS that exits with this code.
      TROUPE_LOG(Error) << "GCS exiting: its Redis at " << redis_address
                        << " is gone: " << status.message()
                        << ". Bring Redis back and run `troupe start --head` again with the same "
                           "--redis-address (the cluster's state is kept there).";
      fflush(stdout);
      fflush(stderr);
      _exit(kGcsStoreLostExitCode);
    };
    auto connected = ConnectToRedis(*redis_options);
    if (!connected.ok()) {
      TROUPE_LOG(Error) << "GCS cannot use Redis at " << redis.address << ": "
                        << connected.status().message();
      return connected.status().code() == absl::StatusCode::kUnavailable ? kGcsStoreLostExitCode
                                                                           : 1;
    }
    TROUPE_LOG(Info) << "GCS state is kept in Redis at " << redis.address << " under "
                     << redis_options->key_prefix;
    store = std::move(*connected);
  } else {
    store = std::make_unique<InMemoryStoreClient>();
  }
  GcsServer server(options, std::move(store));
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
