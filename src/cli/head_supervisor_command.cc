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
//     each time. The GCS is not tied to the supervisor's life: `troupe stop` stops the supervisor
//     first (so nothing is restarted), then the raylets (so they unregister), then the GCS.
//
// It exits:
//   - on SIGTERM/SIGINT: it stops the HTTP server and waits for it, and leaves the GCS running
//     for `troupe stop` (or --block) to stop after the raylets;
//   - (0) when the HTTP server exits with kHttpServerGcsLostExitCode, or the GCS port has refused
//     connections for --gcs-lost-timeout-s, and it does not supervise the GCS: the head is gone;
//   - (1) when the GCS exits with kGcsStoreLostExitCode (its Redis is gone: a new one would fail
//     the same way), or died more than kMaxGcsRestarts times within kGcsRestartWindow;
//   - (1) when the first HTTP server or the first GCS exits (not killed by a signal) before it
//     was seen listening (a bad flag, a taken port): restarting would fail the same way; `troupe
//     start` reports its log.
// Single-threaded: signals (SIGTERM, SIGINT, SIGCHLD) are taken synchronously with sigtimedwait.
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

// Starts `troupe args...` as a child, output appended to `log_path`. With `die_with_parent`
// the child gets SIGTERM when this process dies. Returns its pid, or -1.
pid_t StartChild(const std::vector<std::string>& args, const std::string& log_path,
                 bool die_with_parent) {
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
  if (die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the supervisor died before prctl
  }
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd >= 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
  }
  execv(exe, argv.data());
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
      if (signal_number == SIGTERM || signal_number == SIGINT) {
        StopHttp();
        Log(supervises_gcs() ? "asked to stop; the GCS is left for `troupe stop` to stop"
                             : "asked to stop");
        return 0;
      }
      ReapChildren();
      if (exit_code_ >= 0) break;
      CheckGcsAnswering();
      MaybeStartHttp();
    }
    StopHttp();
    return exit_code_;
  }

 private:
  bool supervises_gcs() const { return !options_.gcs_args.empty(); }

  // How long to sleep in sigtimedwait: short while something is being watched.
  absl::Duration NextWakeUp() const {
    absl::Duration wait = absl::Seconds(1);
    if (supervises_gcs() && gcs_pid_ > 0 && !gcs_answering_) wait = kGcsPortCheckInterval;
    if (http_pid_ > 0 && !http_ever_served_) wait = std::min(wait, kPollInterval);
    if (http_pid_ <= 0 && http_next_start_ != absl::InfiniteFuture()) {
      wait = std::min(wait, std::max(http_next_start_ - absl::Now(), kGcsPortCheckInterval));
    }
    return wait;
  }

  bool StartGcs() {
    gcs_pid_ = StartChild(options_.gcs_args, session_.LogPath("gcs"), /*die_with_parent=*/false);
    if (gcs_pid_ < 0) {
      Log(absl::StrCat("cannot start the GCS: ", std::strerror(errno)));
      exit_code_ = 1;
      return false;
    }
    gcs_started_ = absl::Now();
    gcs_answering_ = false;
    (void)session_.RecordDaemon("gcs", gcs_pid_);
    return true;
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
    if (static_cast<int>(gcs_restarts_.size()) > kMaxGcsRestarts) {
      Log(absl::StrCat("the GCS (pid ", dead, ") ", DescribeExit(wstatus), "; it died ",
                       gcs_restarts_.size(), " times within ",
                       absl::FormatDuration(kGcsRestartWindow),
                       ": giving up (see logs/gcs.log); the head is down"));
      exit_code_ = 1;
      return;
    }
    if (!StartGcs()) return;
    Log(absl::StrCat("the GCS (pid ", dead, ") ", DescribeExit(wstatus),
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
    http_pid_ = StartChild(options_.http_args, session_.LogPath("http"), /*die_with_parent=*/true);
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
  int exit_code_ = -1;  // >= 0: exit with it

  pid_t gcs_pid_ = 0;
  absl::Time gcs_started_;
  absl::Time gcs_died_at_ = absl::InfinitePast();
  bool gcs_answering_ = false;      // the current GCS was seen accepting connections
  bool gcs_ever_answered_ = false;  // some GCS started here was
  std::deque<absl::Time> gcs_restarts_;

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
  FlagParser flags("troupe head-supervisor",
                   "Runs the head's HTTP server (and, given after --, the GCS) as children and "
                   "restarts them when they die. `troupe start --head` starts it for you.");
  flags.AddString("session-dir", &session_dir, "The head's session directory.");
  flags.AddString("gcs-address", &gcs_address, "host:port of the head's GCS.");
  flags.AddString("bind", &bind, "Address the HTTP server listens on.");
  flags.AddInt("http-port", &http_port, "Port the HTTP server listens on (0: no HTTP server).");
  flags.AddInt("gcs-lost-timeout-s", &gcs_lost_timeout_s,
               "Exit (and let the HTTP server exit) once the GCS has been unreachable this long.");
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
      (http_port == 0 && gcs_args.empty())) {
    std::fprintf(stderr,
                 "troupe head-supervisor: needs --gcs-address, --http-port in 0..65535, "
                 "--gcs-lost-timeout-s > 0, and something to supervise (an HTTP port or a GCS "
                 "after --)\n");
    return 2;
  }
  Supervisor::Options options;
  options.gcs_address = gcs_address;
  options.gcs_args = gcs_args;
  options.gcs_lost_timeout = absl::Seconds(gcs_lost_timeout_s);
  if (http_port > 0) {
    options.http_args = {"http-server",
                         absl::StrCat("--address=", gcs_address),
                         absl::StrCat("--token-file=", session->TokenPath()),
                         absl::StrCat("--bind=", bind),
                         absl::StrCat("--port=", http_port),
                         absl::StrCat("--gcs-lost-timeout-s=", gcs_lost_timeout_s)};
    // A TLS head (its session holds a node certificate) serves HTTPS.
    const std::string tls_dir = TlsDirOf(session->dir());
    if (access(NodeCertPath(tls_dir).c_str(), R_OK) == 0) {
      options.http_args.push_back(absl::StrCat("--tls-dir=", tls_dir));
    }
    options.http_listen = absl::StrCat(bind, ":", http_port);
  }
  Supervisor supervisor(std::move(options), *std::move(session));
  return supervisor.Run();
}

}  // namespace troupe
