// Session directories: every `troupe start` records what it started under the temp root
// (default /tmp/troupe, or --temp-dir / TROUPE_TEMP_DIR):
//   session_<time>_<pid>/address   host:port of the cluster's GCS
//   session_<time>_<pid>/token     the cluster token (mode 0600)
//   session_<time>_<pid>/pids/<name>.pid and logs/<name>.log for each daemon
//   session_<time>_<pid>/jobs/       job working directories (removed by `troupe stop`)
//   session_latest -> the newest head session (or a joined node's, when no head runs here)
// `troupe stop` finds processes through these files; `troupe status` finds the cluster.
// Not thread-safe; used by one CLI process at a time.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace troupe {

// The temp root: `flag_value` if set, else $TROUPE_TEMP_DIR, else /tmp/troupe.
std::string ResolveTempRoot(const std::string& flag_value);

struct DaemonRecord {
  std::string name;  // "gcs", "raylet"
  int pid;
};

class Session {
 public:
  // Creates a new session directory under `root` (creating root as needed).
  static absl::StatusOr<Session> Create(const std::string& root);
  // The session that session_latest points to. NotFound if there is none.
  static absl::StatusOr<Session> Latest(const std::string& root);
  // An existing session directory (one with pids/); NotFound otherwise.
  static absl::StatusOr<Session> Open(const std::string& dir);
  // Every session directory under `root`, oldest first.
  static std::vector<Session> All(const std::string& root);

  const std::string& dir() const { return dir_; }
  std::string LogPath(const std::string& name) const { return dir_ + "/logs/" + name + ".log"; }
  std::string TokenPath() const { return dir_ + "/token"; }

  absl::Status WriteFile(const std::string& name, const std::string& content) const;
  // The file's content without a trailing newline; NotFound if missing.
  absl::StatusOr<std::string> ReadFile(const std::string& name) const;
  absl::Status RecordDaemon(const std::string& name, int pid) const;
  void ForgetDaemon(const std::string& name) const;
  // Daemons recorded here that are still running (checked against /proc, so a reused pid that
  // now belongs to another program is not counted).
  std::vector<DaemonRecord> LiveDaemons() const;
  // Points root/session_latest at this session.
  absl::Status MarkLatest() const;

 private:
  explicit Session(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// The raylet's shared-memory object store directory for a session (removed by `troupe stop`,
// also after a SIGKILL).
std::string ObjectStoreDirOf(const Session& session);

// True if `pid` runs and its command line mentions `marker` (our daemons carry their session
// directory in their arguments).
bool ProcessMatches(int pid, const std::string& marker);

}  // namespace troupe
