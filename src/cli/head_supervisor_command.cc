// `troupe head-supervisor`: the small process `troupe start --head` leaves running beside the
// head's daemons (pid file `head-supervisor`, log logs/head-supervisor.log). Today it supervises
// the HTTP server; it is the place where other head daemons (the GCS) can be supervised later.
//
// It runs `troupe http-server` as its child (PR_SET_PDEATHSIG: the child dies with it, so the
// server never outlives its supervisor), keeps pids/http.pid pointing at the current child, and
// when the child dies restarts it on the same port with backoff (0.5 s doubling to 10 s; back to
// 0.5 s after a child that served for 30 s). It exits:
//   - on SIGTERM/SIGINT (`troupe stop` signals it before the HTTP server): it stops the child
//     first and waits for it;
//   - when the child exits with kHttpServerGcsLostExitCode, or the GCS port has refused
//     connections for --gcs-lost-timeout-s: the head is gone, nothing to serve;
//   - when the first child exits (not killed by a signal) before it was seen listening (a bad
//     flag, a taken port): restarting would fail the same way; `troupe start` reports its log.
// Single-threaded: signals are taken synchronously with sigtimedwait.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "src/cli/commands.h"
#include "src/cli/daemon.h"
#include "src/common/flag_parser.h"
#include "src/common/session.h"

namespace troupe {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(500);
constexpr absl::Duration kMaxBackoff = absl::Seconds(10);
constexpr absl::Duration kHealthyRun = absl::Seconds(30);
constexpr absl::Duration kPollInterval = absl::Milliseconds(200);

void Log(const std::string& line) {
  std::printf("%s head-supervisor: %s\n",
              absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::Now(), absl::LocalTimeZone()).c_str(),
              line.c_str());
  std::fflush(stdout);
}

std::string DescribeExit(int wstatus) {
  return WIFEXITED(wstatus) ? absl::StrCat("exited with code ", WEXITSTATUS(wstatus))
                            : absl::StrCat("was killed by signal ", WTERMSIG(wstatus));
}

// Starts `troupe http-server args...` as a child that dies with this process; output appended
// to `log_path`. Returns its pid, or -1.
pid_t StartChild(const std::vector<std::string>& args, const std::string& log_path) {
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
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);  // the supervisor died before prctl
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd >= 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
  }
  execv(exe, argv.data());
  _exit(127);
}

// Waits up to `timeout` for a stop signal; true if one came.
bool StopRequested(const sigset_t& stop_signals, absl::Duration timeout) {
  const timespec wait = absl::ToTimespec(timeout);
  int signal_number;
  do {
    signal_number = sigtimedwait(&stop_signals, nullptr, &wait);
  } while (signal_number < 0 && errno == EINTR);
  return signal_number > 0;
}

}  // namespace

int HeadSupervisorMain(const std::vector<std::string>& args) {
  std::string session_dir, gcs_address, bind = "127.0.0.1";
  int64_t http_port = 8265, gcs_lost_timeout_s = 60;
  FlagParser flags("troupe head-supervisor",
                   "Runs the head's HTTP server as a child and restarts it when it dies. "
                   "`troupe start --head` starts it for you.");
  flags.AddString("session-dir", &session_dir, "The head's session directory.");
  flags.AddString("gcs-address", &gcs_address, "host:port of the head's GCS.");
  flags.AddString("bind", &bind, "Address the HTTP server listens on.");
  flags.AddInt("http-port", &http_port, "Port the HTTP server listens on.");
  flags.AddInt("gcs-lost-timeout-s", &gcs_lost_timeout_s,
               "Exit (and let the HTTP server exit) once the GCS has been unreachable this long.");
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
  if (gcs_address.empty() || http_port <= 0 || http_port > 65535 || gcs_lost_timeout_s <= 0) {
    std::fprintf(stderr,
                 "troupe head-supervisor: needs --gcs-address, --http-port in 1..65535 and "
                 "--gcs-lost-timeout-s > 0\n");
    return 2;
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(SIG_BLOCK, &stop_signals, nullptr);

  const std::vector<std::string> child_args = {
      "http-server",
      absl::StrCat("--address=", gcs_address),
      absl::StrCat("--token-file=", session->TokenPath()),
      absl::StrCat("--bind=", bind),
      absl::StrCat("--port=", http_port),
      absl::StrCat("--gcs-lost-timeout-s=", gcs_lost_timeout_s)};
  const std::string listen = absl::StrCat(bind, ":", http_port);
  const absl::Duration gcs_lost_timeout = absl::Seconds(gcs_lost_timeout_s);
  absl::Duration backoff = kFirstBackoff;
  bool ever_served = false;
  while (true) {
    const pid_t child = StartChild(child_args, session->LogPath("http"));
    if (child < 0) {
      Log(absl::StrCat("cannot start the HTTP server: ", std::strerror(errno)));
      return 1;
    }
    (void)session->RecordDaemon("http", child);
    const absl::Time started = absl::Now();
    int wstatus = 0;
    while (waitpid(child, &wstatus, WNOHANG) != child) {
      if (StopRequested(stop_signals, kPollInterval)) {
        kill(child, SIGTERM);
        waitpid(child, nullptr, 0);
        session->ForgetDaemon("http");
        Log("stopped the HTTP server (asked to stop)");
        return 0;
      }
      if (!ever_served && TcpConnectable(listen).ok()) ever_served = true;
    }
    session->ForgetDaemon("http");
    // A first server that exited on its own before it was seen listening failed to start (its
    // log says why); one killed by a signal is restarted like any other.
    if (!ever_served && WIFEXITED(wstatus)) {
      Log(absl::StrCat("the HTTP server ", DescribeExit(wstatus),
                       " before it ever listened; not restarting it (see logs/http.log)"));
      return 1;
    }
    ever_served = true;
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == kHttpServerGcsLostExitCode) {
      Log("the HTTP server stopped because the GCS is gone; the head is down, exiting");
      return 0;
    }
    if (absl::Now() - started > kHealthyRun) backoff = kFirstBackoff;
    Log(absl::StrCat("the HTTP server (pid ", child, ") ", DescribeExit(wstatus),
                     "; restarting it in ", absl::FormatDuration(backoff)));
    if (StopRequested(stop_signals, backoff)) return 0;
    backoff = std::min(backoff * 2, kMaxBackoff);
    // Without a GCS a new server could not start; wait for it, up to the bound.
    const absl::Time checking_since = absl::Now();
    while (!TcpConnectable(gcs_address).ok()) {
      if (absl::Now() - checking_since > gcs_lost_timeout) {
        Log(absl::StrCat("the GCS at ", gcs_address, " has been unreachable for ",
                         absl::FormatDuration(gcs_lost_timeout), "; the head is down, exiting"));
        return 0;
      }
      if (StopRequested(stop_signals, kPollInterval)) return 0;
    }
  }
}

}  // namespace troupe
