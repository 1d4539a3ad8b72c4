// `troupe head-supervisor`: the small process `troupe start --head` leaves running beside the
// head's daemons (pid file `head-supervisor`, log logs/head-supervisor.log). It supervises:
//
//   - the HTTP server (`troupe http-server`, when --http-port > 0), as a child that dies with it
//     (PR_SET_PDEATHSIG), pid file `http`. When it dies it is restarted on the same port with
//     backoff (0.5 s doubling to 10 s; back to 0.5 s after a child that served for 30 s), once the
//     GCS accepts connections again.
//   - the GCS, when given after "--" (`troupe start --head --redis-address=...` does so: only a
//     GCS whose state is in Redis can be restarted without losing the cluster). It is restarted at
//     once when it dies (SIGCHLD, no polling), with the same flags, and pids/gcs.pid is rewritten
//     each time. Once it has answered, it is health-checked over its real port (a GetClusterInfo
//     call with a deadline, every --gcs-health-check-period-ms); after
//     --gcs-health-check-failure-threshold misses in a row it is hung (SIGSTOPped, deadlocked):
//     it is SIGKILLed and restarted like a GCS that died. The GCS dies with the supervisor
//     (PR_SET_PDEATHSIG SIGKILL), so a supervisor that is killed leaves no GCS holding the port.
//
// It exits:
//   - on SIGTERM/SIGINT: it stops the HTTP server and waits for it; a supervised GCS is left
//     running (not restarted any more) for `troupe stop` (or --block) to stop after the raylets,
//     and the supervisor exits once it has; without a GCS it exits at once;
//   - (0) when the HTTP server exits with kHttpServerGcsLostExitCode, or the GCS port has refused
//     connections for --gcs-lost-timeout-s, and it does not supervise the GCS: the head is gone;
//   - (1) when the GCS exits with kGcsStoreLostExitCode (its Redis is gone: a new one would fail
//     the same way), or died more than kMaxGcsRestarts times within kGcsRestartWindow;
//   - (1) when the first HTTP server or the first GCS exits (not killed by a signal) before it
//     was seen listening (a bad flag, a taken port): restarting would fail the same way; `troupe
//     start` reports its log.
// One thread drives it: signals (SIGTERM, SIGINT, SIGCHLD) are taken synchronously with
// sigtimedwait; the health check blocks that thread for at most its deadline. Children are forked
// from that thread only (it lives as long as the process, so PR_SET_PDEATHSIG fires only when the
// process dies).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/cli/commands.h"
#include "src/cli/daemon.h"
#include "src/cli/redis_flags.h"
#include "src/common/flag_parser.h"
#include "src/common/session.h"
#include "src/rpc/cluster_token.h"
#include "src/rpc/gcs_client.h"
#include "src/rpc/transport_security.h"
#include "src/tls/tls_files.h"

namespace troupe {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(500);
constexpr absl::Duration kMaxBackoff = absl::Seconds(10);
constexpr absl::Duration kHealthyRun = absl::Seconds(30);
constexpr absl::Duration kPollInterval = absl::Milliseconds(200);
// How often the GCS's port is checked while a new GCS is coming up (to log when it answers).
constexpr absl::Duration kGcsPortCheckInterval = absl::Milliseconds(10);
constexpr int kMaxGcsRestarts = 10;
constexpr absl::Duration kGcsRestartWindow = absl::Minutes(1);

void Log(const std::string& line) {
  std::printf("%s head-supervisor: %s\n",
              absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::Now(), absl::LocalTimeZone()).c_str(),
              line.c_str());
  std::fflush(stdout);
}

std::string DescribeExit(int wstatus) {
  return WIFEXITED(wstatus) ? absl::StrCat("exited with code ", WEXITSTATUS(wstatus))
                            : absl::StrCat("was killed by signal ", WTERMSIG(wstatus), " (",
                                           strsignal(WTERMSIG(wstatus)), ")");
}

// Starts `troupe args...` as a child, output appended to `log_path`; the child gets
// `death_signal` when this process dies (PR_SET_PDEATHSIG). Returns its pid, or -1.
pid_t StartChild(const std::vector<std::string>& args, const std::string& log_path,
                 int death_signal) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return -1;
  exe[n] = '\0';
  std::vector<char*> argv = {exe};
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // The child: its own signal mask is inherited; unblock what the server waits for itself.
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_UNBLOCK, &all, nullptr);
  prctl(PR_SET_PDEATHSIG, death_signal);
  if (getppid() != parent) _exit(1);  // the supervisor died before prctl
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd >= 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
  }
  execv(exe, argv.data());
  dprintf(STDERR_FILENO, "troupe head-supervisor: cannot run %s: %s\n", exe, strerror(errno));
  _exit(127);
}

// The supervisor's state and event handlers. Lives on the one thread of HeadSupervisorMain.
class Supervisor {
 public:
  struct Options {
    std::string gcs_address;
    std::vector<std::string> http_args;  // empty: no HTTP server
    std::string http_listen;
    std::vector<std::string> gcs_args;  // empty: the GCS is not supervised
    absl::Duration gcs_lost_timeout;
    std::string token;  // the cluster token, for the GCS health check
    absl::Duration health_check_period = absl::Seconds(1);
    absl::Duration health_check_timeout = absl::Seconds(2);
    int health_check_failure_threshold = 3;
  };

  Supervisor(Options options, Session session)
      : options_(std::move(options)), session_(std::move(session)) {}

  // Runs until it should exit; returns the exit code.
  int Run() {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGCHLD);
    sigprocmask(SIG_BLOCK, &signals, nullptr);
    if (supervises_gcs()) {
      if (!StartGcs()) return 1;
    }
    if (!options_.http_args.empty()) http_next_start_ = absl::Now();
    while (exit_code_ < 0) {
      const timespec wait = absl::ToTimespec(NextWakeUp());
      const int signal_number = sigtimedwait(&signals, nullptr, &wait);
      if ((signal_number == SIGTERM || signal_number == SIGINT) && !stopping_) BeginStop();
      ReapChildren();
      if (exit_code_ >= 0) break;
      if (stopping_) continue;  // only waits for the GCS to exit now
      CheckGcsAnswering();
      CheckGcsHealth();
      MaybeStartHttp();
    }
    StopHttp();
    return exit_code_;
  }

 private:
  bool supervises_gcs() const { return !options_.gcs_args.empty(); }

  // SIGTERM/SIGINT: stop the HTTP server and restart nothing from now on. A supervised GCS that
  // runs is left for `troupe stop` to stop after the raylets (so they can unregister); this
  // process stays its parent until then, so it still dies with the supervisor.
  void BeginStop() {
    stopping_ = true;
    StopHttp();
    if (supervises_gcs() && gcs_pid_ > 0) {
      Log(absl::StrCat("asked to stop; the GCS (pid ", gcs_pid_,
                       ") is left for `troupe stop` to stop after the raylets and is not "
                       "restarted any more; exiting once it has exited"));
      return;
    }
    Log("asked to stop");
    exit_code_ = 0;
  }

  // How long to sleep in sigtimedwait: short while something is being watched.
  absl::Duration NextWakeUp() const {
    absl::Duration wait = absl::Seconds(1);
    if (stopping_) return wait;
    if (supervises_gcs() && gcs_pid_ > 0 && gcs_answering_) {
      wait = std::min(wait, std::max(next_health_check_ - absl::Now(), kGcsPortCheckInterval));
    }
    if (supervises_gcs() && gcs_pid_ > 0 && !gcs_answering_) wait = kGcsPortCheckInterval;
    if (http_pid_ > 0 && !http_ever_served_) wait = std::min(wait, kPollInterval);
    if (http_pid_ <= 0 && http_next_start_ != absl::InfiniteFuture()) {
      wait = std::min(wait, std::max(http_next_start_ - absl::Now(), kGcsPortCheckInterval));
    }
    return wait;
  }

  bool StartGcs() {
    // SIGKILL with the supervisor: a GCS left behind would hold the port, unsupervised, and a
    // new `troupe start --head` could not start (its state is in Redis; nothing is lost).
    gcs_pid_ = StartChild(options_.gcs_args, session_.LogPath("gcs"), SIGKILL);
    if (gcs_pid_ < 0) {
      Log(absl::StrCat("cannot start the GCS: ", std::strerror(errno)));
      exit_code_ = 1;
      return false;
    }
    gcs_started_ = absl::Now();
    gcs_answering_ = false;
    gcs_health_misses_ = 0;
    gcs_killed_as_hung_ = false;
    // A fresh client per GCS: a channel that saw the old one die backs off before reconnecting.
    health_client_ = std::make_unique<GcsClient>(options_.gcs_address, options_.token,
                                                 options_.health_check_timeout);
    (void)session_.RecordDaemon("gcs", gcs_pid_);
    return true;
  }

  // Once the GCS answered: one GetClusterInfo with a deadline per period. A GCS that misses
  // health_check_failure_threshold in a row is alive but not answering (hung): SIGKILL it; its
  // SIGCHLD restarts it like any GCS death.
  void CheckGcsHealth() {
    if (!supervises_gcs() || gcs_pid_ <= 0 || !gcs_answering_ || gcs_killed_as_hung_) return;
    const absl::Time now = absl::Now();
    if (now < next_health_check_) return;
    next_health_check_ = now + options_.health_check_period;
    const absl::Status answer = health_client_->GetClusterInfo().status();
    if (answer.ok()) {
      if (gcs_health_misses_ > 0) {
        Log(absl::StrCat("the GCS (pid ", gcs_pid_, ") answers health checks again after ",
                         gcs_health_misses_, " miss(es)"));
      }
      gcs_health_misses_ = 0;
      return;
    }
    ++gcs_health_misses_;
    Log(absl::StrCat("the GCS (pid ", gcs_pid_, ") missed a health check (", gcs_health_misses_,
                     " of ", options_.health_check_failure_threshold,
                     " in a row): ", answer.message()));
    if (gcs_health_misses_ < options_.health_check_failure_threshold) return;
    Log(absl::StrCat("the GCS (pid ", gcs_pid_, ") is running but has not answered ",
                     gcs_health_misses_, " health checks in a row (each with a ",
                     absl::FormatDuration(options_.health_check_timeout),
                     " deadline): it is hung; killing it (SIGKILL) to restart it"));
    gcs_killed_as_hung_ = true;
    kill(gcs_pid_, SIGKILL);
  }

  void CheckGcsAnswering() {
    if (!supervises_gcs() || gcs_pid_ <= 0 || gcs_answering_) return;
    if (!TcpConnectable(options_.gcs_address).ok()) return;
    gcs_answering_ = true;
    gcs_ever_answered_ = true;
    if (gcs_died_at_ != absl::InfinitePast()) {
      Log(absl::StrCat("the GCS (pid ", gcs_pid_, ") accepts connections at ",
                       options_.gcs_address, ", ", absl::FormatDuration(absl::Now() - gcs_died_at_),
                       " after the previous one died"));
    } else {
      Log(absl::StrCat("the GCS (pid ", gcs_pid_, ") accepts connections at ",
                       options_.gcs_address));
    }
  }

  void ReapChildren() {
    int wstatus = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &wstatus, WNOHANG)) > 0) {
      if (pid == gcs_pid_) {
        OnGcsExit(wstatus);
      } else if (pid == http_pid_) {
        OnHttpExit(wstatus);
      }
      if (exit_code_ >= 0) return;
    }
  }

  void OnGcsExit(int wstatus) {
    const absl::Time now = absl::Now();
    const pid_t dead = gcs_pid_;
    gcs_pid_ = 0;
    gcs_died_at_ = now;
    session_.ForgetDaemon("gcs");
    if (stopping_) {
      Log(absl::StrCat("the GCS (pid ", dead, ") ", DescribeExit(wstatus),
                       "; not restarting it (asked to stop); exiting"));
      exit_code_ = 0;
      return;
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == kGcsStoreLostExitCode) {
      Log(absl::StrCat("the GCS (pid ", dead, ") ", DescribeExit(wstatus),
                       ": its Redis is gone (see logs/gcs.log); not restarting it, the head is "
                       "down"));
      exit_code_ = 1;
      return;
    }
    if (!gcs_ever_answered_ && WIFEXITED(wstatus)) {
      Log(absl::StrCat("the GCS (pid ", dead, ") ", DescribeExit(wstatus),
                       " before it ever listened; not restarting it (see logs/gcs.log)"));
      exit_code_ = 1;
      return;
    }
    gcs_restarts_.push_back(now);
    while (!gcs_restarts_.empty() && now - gcs_restarts_.front() > kGcsRestartWindow) {
      gcs_restarts_.pop_front();
    }
    const bool was_hung = gcs_killed_as_hung_;
    if (static_cast<int>(gcs_restarts_.size()) > kMaxGcsRestarts) {
      Log(absl::StrCat("the GCS (pid ", dead, ") ", DescribeExit(wstatus), "; it died ",
                       gcs_restarts_.size(), " times within ",
                       absl::FormatDuration(kGcsRestartWindow),
                       ": giving up (see logs/gcs.log); the head is down"));
      exit_code_ = 1;
      return;
    }
    if (!StartGcs()) return;
    Log(absl::StrCat("the GCS (pid ", dead, ") ",
                     was_hung ? "was hung and killed by this supervisor" : DescribeExit(wstatus),
                     "; restarted it (pid ", gcs_pid_, ", restart ", gcs_restarts_.size(),
                     " within the last minute)"));
  }

  void OnHttpExit(int wstatus) {
    const pid_t dead = http_pid_;
    http_pid_ = 0;
    session_.ForgetDaemon("http");
    // A first server that exited on its own before it was seen listening failed to start (its
    // log says why); one killed by a signal is restarted like any other.
    if (!http_ever_served_ && WIFEXITED(wstatus)) {
      Log(absl::StrCat("the HTTP server ", DescribeExit(wstatus),
                       " before it ever listened; not restarting it (see logs/http.log)"));
      exit_code_ = 1;
      return;
    }
    http_ever_served_ = true;
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == kHttpServerGcsLostExitCode &&
        !supervises_gcs()) {
      Log("the HTTP server stopped because the GCS is gone; the head is down, exiting");
      exit_code_ = 0;
      return;
    }
    if (absl::Now() - http_started_ > kHealthyRun) http_backoff_ = kFirstBackoff;
    Log(absl::StrCat("the HTTP server (pid ", dead, ") ", DescribeExit(wstatus),
                     "; restarting it in ", absl::FormatDuration(http_backoff_)));
    http_next_start_ = absl::Now() + http_backoff_;
    http_backoff_ = std::min(http_backoff_ * 2, kMaxBackoff);
    gcs_unreachable_since_ = absl::InfiniteFuture();
  }

  // Starts the HTTP server when one is due and the GCS accepts connections (a new server could
  // not start without it). Without GCS supervision, a GCS gone for gcs_lost_timeout ends it.
  void MaybeStartHttp() {
    if (http_pid_ > 0) {
      if (!http_ever_served_ && TcpConnectable(options_.http_listen).ok()) {
        http_ever_served_ = true;
      }
      return;
    }
    if (http_next_start_ == absl::InfiniteFuture() || absl::Now() < http_next_start_) return;
    if (!TcpConnectable(options_.gcs_address).ok()) {
      const absl::Time now = absl::Now();
      if (gcs_unreachable_since_ == absl::InfiniteFuture()) gcs_unreachable_since_ = now;
      if (!supervises_gcs() && now - gcs_unreachable_since_ > options_.gcs_lost_timeout) {
        Log(absl::StrCat("the GCS at ", options_.gcs_address, " has been unreachable for ",
                         absl::FormatDuration(options_.gcs_lost_timeout),
                         "; the head is down, exiting"));
        exit_code_ = 0;
      }
      return;
    }
    http_pid_ = StartChild(options_.http_args, session_.LogPath("http"), SIGTERM);
    if (http_pid_ < 0) {
      Log(absl::StrCat("cannot start the HTTP server: ", std::strerror(errno)));
      exit_code_ = 1;
      return;
    }
    (void)session_.RecordDaemon("http", http_pid_);
    http_started_ = absl::Now();
    http_next_start_ = absl::InfiniteFuture();
    gcs_unreachable_since_ = absl::InfiniteFuture();
  }

  void StopHttp() {
    if (http_pid_ <= 0) return;
    kill(http_pid_, SIGTERM);
    waitpid(http_pid_, nullptr, 0);
    session_.ForgetDaemon("http");
    Log("stopped the HTTP server");
    http_pid_ = 0;
  }

  const Options options_;
  const Session session_;
  int exit_code_ = -1;     // >= 0: exit with it
  bool stopping_ = false;  // asked to stop: restarts nothing, waits for the GCS to exit

  pid_t gcs_pid_ = 0;
  absl::Time gcs_started_;
  absl::Time gcs_died_at_ = absl::InfinitePast();
  bool gcs_answering_ = false;      // the current GCS was seen accepting connections
  bool gcs_ever_answered_ = false;  // some GCS started here was
  std::deque<absl::Time> gcs_restarts_;
  std::unique_ptr<GcsClient> health_client_;  // for the current GCS
  absl::Time next_health_check_ = absl::InfinitePast();
  int gcs_health_misses_ = 0;        // in a row, for the current GCS
  bool gcs_killed_as_hung_ = false;  // the current GCS was SIGKILLed for missing them

  pid_t http_pid_ = 0;
  absl::Time http_started_;
  absl::Time http_next_start_ = absl::InfiniteFuture();
  absl::Duration http_backoff_ = kFirstBackoff;
  bool http_ever_served_ = false;
  absl::Time gcs_unreachable_since_ = absl::InfiniteFuture();
};

}  // namespace

int HeadSupervisorMain(const std::vector<std::string>& args) {
  std::string session_dir, gcs_address, bind = "127.0.0.1";
  int64_t http_port = 8265, gcs_lost_timeout_s = 60;
  int64_t health_check_period_ms = 1000, health_check_timeout_ms = 2000,
          health_check_failure_threshold = 3;
  FlagParser flags("troupe head-supervisor",
                   "Runs the head's HTTP server (and, given after --, the GCS) as children and "
                   "restarts them when they die. `troupe start --head` starts it for you.");
  flags.AddString("session-dir", &session_dir, "The head's session directory.");
  flags.AddString("gcs-address", &gcs_address, "host:port of the head's GCS.");
  flags.AddString("bind", &bind, "Address the HTTP server listens on.");
  flags.AddInt("http-port", &http_port, "Port the HTTP server listens on (0: no HTTP server).");
  flags.AddInt("gcs-lost-timeout-s", &gcs_lost_timeout_s,
               "Exit (and let the HTTP server exit) once the GCS has been unreachable this long.");
  flags.AddInt("gcs-health-check-period-ms", &health_check_period_ms,
               "With a GCS to supervise: how often to check that it answers (a GetClusterInfo "
               "call on its port).");
  flags.AddInt("gcs-health-check-timeout-ms", &health_check_timeout_ms,
               "Deadline of each GCS health check.");
  flags.AddInt("gcs-health-check-failure-threshold", &health_check_failure_threshold,
               "Misses in a row after which the GCS counts as hung and is killed and restarted.");
  flags.SetEpilog(
      "After --: the `gcs-server ...` command line of a GCS to run and restart (only for a GCS "
      "that keeps its state in Redis).");
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "troupe head-supervisor: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  auto session = Session::Open(session_dir);
  if (!session.ok()) {
    std::fprintf(stderr, "troupe head-supervisor: %s\n",
                 std::string(session.status().message()).c_str());
    return 2;
  }
  const std::vector<std::string>& gcs_args = flags.positional();
  if (!gcs_args.empty() && gcs_args[0] != "gcs-server") {
    std::fprintf(stderr, "troupe head-supervisor: after -- expected `gcs-server ...`, got '%s'\n",
                 gcs_args[0].c_str());
    return 2;
  }
  if (gcs_address.empty() || http_port < 0 || http_port > 65535 || gcs_lost_timeout_s <= 0 ||
      (http_port == 0 && gcs_args.empty()) || health_check_period_ms <= 0 ||
      health_check_timeout_ms <= 0 || health_check_failure_threshold <= 0) {
    std::fprintf(stderr,
                 "troupe head-supervisor: needs --gcs-address, --http-port in 0..65535, "
                 "--gcs-lost-timeout-s > 0, --gcs-health-check-* > 0, and something to "
                 "supervise (an HTTP port or a GCS after --)\n");
    return 2;
  }
  // The GCS health check is a real call: it needs the token and, on a TLS head, the cluster CA.
  auto token = ReadTokenFile(session->TokenPath());
  if (!token.ok()) {
    std::fprintf(stderr, "troupe head-supervisor: %s\n",
                 std::string(token.status().message()).c_str());
    return 2;
  }
  const std::string tls_dir = TlsDirOf(session->dir());
  const bool tls = access(NodeCertPath(tls_dir).c_str(), R_OK) == 0;
  if (auto status = UseTlsDir(tls ? tls_dir : ""); !status.ok()) {
    std::fprintf(stderr, "troupe head-supervisor: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  Supervisor::Options options;
  options.gcs_address = gcs_address;
  options.gcs_args = gcs_args;
  options.gcs_lost_timeout = absl::Seconds(gcs_lost_timeout_s);
  options.token = token->ToString();
  options.health_check_period = absl::Milliseconds(health_check_period_ms);
  options.health_check_timeout = absl::Milliseconds(health_check_timeout_ms);
  options.health_check_failure_threshold = static_cast<int>(health_check_failure_threshold);
  if (http_port > 0) {
    options.http_args = {"http-server",
                         absl::StrCat("--address=", gcs_address),
                         absl::StrCat("--token-file=", session->TokenPath()),
                         absl::StrCat("--bind=", bind),
                         absl::StrCat("--port=", http_port),
                         absl::StrCat("--gcs-lost-timeout-s=", gcs_lost_timeout_s)};
    // A TLS head (its session holds a node certificate) serves HTTPS.
    if (tls) options.http_args.push_back(absl::StrCat("--tls-dir=", tls_dir));
    options.http_listen = absl::StrCat(bind, ":", http_port);
  }
  Supervisor supervisor(std::move(options), *std::move(session));
  return supervisor.Run();
}

}  // namespace troupe
