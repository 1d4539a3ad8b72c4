// `troupe stop`: stops every Troupe daemon started on this machine (found through the session
// directories): the head supervisor and the HTTP server first, then raylets so they can
// unregister from a still-running GCS, then the GCS; and removes what the sessions left behind
// (object stores in /dev/shm, job working directories). A head supervisor that runs the GCS
// (with Redis) stops its HTTP server and restarting at SIGTERM, and exits after its GCS.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/cli/commands.h"
#include "src/common/flag_parser.h"
#include "src/common/remove_tree.h"
#include "src/common/session.h"

namespace troupe {
namespace {

struct Target {
  Session session;
  DaemonRecord daemon;
};

// Sends `signal_number` to each target (0: none) and waits up to `grace` for them to exit;
// returns those still running.
std::vector<Target> SignalAndWait(const std::vector<Target>& targets, int signal_number,
                                  absl::Duration grace) {
  for (const auto& target : targets) kill(target.daemon.pid, signal_number);
  const absl::Time deadline = absl::Now() + grace;
  std::vector<Target> running = targets;
  while (!running.empty()) {
    std::vector<Target> still;
    for (const auto& target : running) {
      if (ProcessMatches(target.daemon.pid, target.session.dir())) still.push_back(target);
    }
    running = std::move(still);
    if (running.empty() || absl::Now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return running;
}

// After SIGTERM, a head supervisor stops its HTTP server (and forgets its pid file) and, when it
// runs the GCS, stays until the GCS exits. Waits up to `grace` until each has exited or has no
// HTTP server left; returns those that have not got that far.
std::vector<Target> WaitForSupervisorsToStopHttp(const std::vector<Target>& supervisors,
                                                 absl::Duration grace) {
  const absl::Time deadline = absl::Now() + grace;
  std::vector<Target> waiting = supervisors;
  while (!waiting.empty()) {
    std::vector<Target> still;
    for (const auto& target : waiting) {
      if (!ProcessMatches(target.daemon.pid, target.session.dir())) continue;
      bool http_running = false;
      for (const auto& daemon : target.session.LiveDaemons()) http_running |= daemon.name == "http";
      if (http_running) still.push_back(target);
    }
    waiting = std::move(still);
    if (waiting.empty() || absl::Now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return waiting;
}

// rm -r for one directory of plain files (an object store).
void RemoveStoreDir(const std::string& dir) {
  if (DIR* handle = opendir(dir.c_str())) {
    while (dirent* entry = readdir(handle)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") unlink((dir + "/" + name).c_str());
    }
    closedir(handle);
    rmdir(dir.c_str());
  }
}

// Forgets daemons that are gone and, for every session with none left, removes what its SIGKILLed
// processes could not: the object store in /dev/shm (it holds RAM) and job working directories.
// False (after saying on stderr what was left and why) if a job directory could not be removed.
bool CleanUpStoppedSessions(const std::string& root) {
  bool removed_all = true;
  for (const auto& session : Session::All(root)) {
    for (const char* name : {"gcs", "raylet", "http", "head-supervisor"}) {
      bool alive = false;
      for (const auto& daemon : session.LiveDaemons()) alive |= daemon.name == name;
      if (!alive) session.ForgetDaemon(name);
    }
    // A raylet killed with SIGKILL leaves its shared-memory objects behind: they hold RAM.
    if (session.LiveDaemons().empty()) {
      RemoveStoreDir(ObjectStoreDirOf(session));
      // Job working directories, however deep (symlinks removed, never followed).
      if (absl::Status removed = RemoveTree(session.dir() + "/jobs"); !removed.ok()) {
        fprintf(stderr, "troupe stop: job working directories were left: %s\n",
                std::string(removed.message()).c_str());
        removed_all = false;
      }
    }
  }
  return removed_all;
}

}  // namespace

int StopCommand(const std::vector<std::string>& args) {
  bool force = false;
  std::string temp_dir;
  int64_t grace_s = 10;
  FlagParser flags("troupe stop",
                   "Stops the Troupe nodes (heads and worker nodes) started on this machine "
                   "under one temp root (--temp-dir, $TROUPE_TEMP_DIR or /tmp/troupe); nodes "
                   "started with another --temp-dir keep running.");
  flags.AddBool("force", &force, "Kill with SIGKILL at once instead of stopping gracefully.");
  flags.AddString("temp-dir", &temp_dir,
                  "Root of session directories (default: $TROUPE_TEMP_DIR or /tmp/troupe).");
  flags.AddInt("grace-period-s", &grace_s,
               "How long to wait for a graceful stop before using SIGKILL.");
  if (auto status = flags.Parse(args); !status.ok()) {
    fprintf(stderr, "troupe stop: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (!flags.positional().empty()) {
    fprintf(stderr, "troupe stop: unexpected argument '%s' (see `troupe stop --help`)\n",
            flags.positional()[0].c_str());
    return 2;
  }
  const std::string root = ResolveTempRoot(temp_dir);
  std::vector<Target> supervisors, http, raylets, others;
  for (const auto& session : Session::All(root)) {
    for (const auto& daemon : session.LiveDaemons()) {
      (daemon.name == "raylet"            ? raylets
       : daemon.name == "http"            ? http
       : daemon.name == "head-supervisor" ? supervisors
                                          : others)
          .push_back({session, daemon});
    }
  }
  const size_t total = supervisors.size() + http.size() + raylets.size() + others.size();
  if (total == 0) {
    // Still clean up: nodes that were SIGKILLed (a crash, a test's teardown) left their stores.
    const bool cleaned = CleanUpStoppedSessions(root);
    printf("No Troupe node started under %s is running (nodes started with another --temp-dir "
           "are not looked at).\n",
           root.c_str());
    return cleaned ? 0 : 1;
  }
  std::vector<Target> stubborn;
  if (force) {
    std::vector<Target> all = supervisors;  // first: nothing restarts the HTTP server then
    all.insert(all.end(), raylets.begin(), raylets.end());
    all.insert(all.end(), others.begin(), others.end());
    all.insert(all.end(), http.begin(), http.end());
    stubborn = SignalAndWait(all, SIGKILL, absl::Seconds(5));
  } else {
    // The head supervisor stops its HTTP server and restarts nothing from now on (one running
    // the GCS stays until the GCS exits); then any HTTP server left (one whose supervisor is
    // gone).
    for (const auto& target : supervisors) kill(target.daemon.pid, SIGTERM);
    stubborn = WaitForSupervisorsToStopHttp(supervisors, absl::Seconds(grace_s));
    // (Only those still running: a supervisor removes its server's pid file as it stops it.)
    std::vector<Target> http_left;
    for (const auto& target : http) {
      if (ProcessMatches(target.daemon.pid, target.session.dir())) http_left.push_back(target);
    }
    auto after_supervisors = SignalAndWait(http_left, SIGTERM, absl::Seconds(grace_s));
    stubborn.insert(stubborn.end(), after_supervisors.begin(), after_supervisors.end());
    auto after_http = SignalAndWait(raylets, SIGTERM, absl::Seconds(grace_s));
    stubborn.insert(stubborn.end(), after_http.begin(), after_http.end());
    auto rest = SignalAndWait(others, SIGTERM, absl::Seconds(grace_s));
    stubborn.insert(stubborn.end(), rest.begin(), rest.end());
    // The supervisors that waited for their GCS exit with it (signal 0: only wait).
    std::vector<Target> supervisors_left;
    for (const auto& target : supervisors) {
      bool counted = false;
      for (const auto& s : stubborn) counted |= s.daemon.pid == target.daemon.pid;
      if (!counted) supervisors_left.push_back(target);
    }
    auto after_gcs = SignalAndWait(supervisors_left, 0, absl::Seconds(grace_s));
    stubborn.insert(stubborn.end(), after_gcs.begin(), after_gcs.end());
    if (!stubborn.empty()) {
      fprintf(stderr, "troupe stop: %zu process(es) ignored SIGTERM for %lld s; using SIGKILL\n",
              stubborn.size(), static_cast<long long>(grace_s));
      stubborn = SignalAndWait(stubborn, SIGKILL, absl::Seconds(5));
    }
  }
  const bool cleaned = CleanUpStoppedSessions(root);
  if (!stubborn.empty()) {
    for (const auto& target : stubborn) {
      fprintf(stderr, "troupe stop: %s (pid %d) is still running\n", target.daemon.name.c_str(),
              target.daemon.pid);
    }
    return 1;
  }
  printf("Stopped %zu Troupe process%s%s.\n", total, total == 1 ? "" : "es",
         force ? " with SIGKILL" : "");
  return cleaned ? 0 : 1;
}

}  // namespace troupe
