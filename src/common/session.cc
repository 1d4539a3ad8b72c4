#include "src/common/session.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace troupe {
namespace {

absl::Status MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create directory ", partial, ": ", std::strerror(errno),
                       " (choose another with --temp-dir or TROUPE_TEMP_DIR)"));
    }
  }
  return absl::OkStatus();
}

std::string ReadWhole(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = static_cast<bool>(in);
  std::stringstream text;
  if (*ok) text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string ResolveTempRoot(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  if (const char* env = std::getenv("TROUPE_TEMP_DIR"); env != nullptr && *env) return env;
  return "/tmp/troupe";
}

absl::StatusOr<Session> Session::Create(const std::string& root) {
  std::string name = absl::StrCat(
      "session_", absl::FormatTime("%Y-%m-%d_%H-%M-%S", absl::Now(), absl::LocalTimeZone()), "_",
      getpid());
  Session session(absl::StrCat(root, "/", name));
  for (const char* sub : {"/logs", "/pids"}) {
    if (auto status = MakeDirs(session.dir_ + sub); !status.ok()) return status;
  }
  return session;
}

absl::StatusOr<Session> Session::Latest(const std::string& root) {
  std::string link = root + "/session_latest";
  char target[4096];
  ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if (n <= 0) return absl::NotFoundError(absl::StrCat("no ", link));
  target[n] = '\0';
  std::string dir = target[0] == '/' ? std::string(target) : absl::StrCat(root, "/", target);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(link, " is dangling"));
  return Session(dir);
}

absl::StatusOr<Session> Session::Open(const std::string& dir) {
  struct stat st;
  if (stat((dir + "/pids").c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat(dir, " is not a Troupe session directory (no pids/)"));
  }
  return Session(dir);
}

std::vector<Session> Session::All(const std::string& root) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(root.c_str())) {
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (absl::StartsWith(name, "session_") && name != "session_latest") names.push_back(name);
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  std::vector<Session> sessions;
  for (const auto& name : names) sessions.push_back(Session(absl::StrCat(root, "/", name)));
  return sessions;
}

absl::Status Session::WriteFile(const std::string& name, const std::string& content) const {
  std::ofstream out(dir_ + "/" + name, std::ios::trunc);
  out << content << "\n";
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", dir_, "/", name));
  return absl::OkStatus();
}

absl::StatusOr<std::string> Session::ReadFile(const std::string& name) const {
  bool ok;
  std::string content = ReadWhole(dir_ + "/" + name, &ok);
  if (!ok) return absl::NotFoundError(absl::StrCat("no ", dir_, "/", name));
  return std::string(absl::StripTrailingAsciiWhitespace(content));
}

absl::Status Session::RecordDaemon(const std::string& name, int pid) const {
  return WriteFile(absl::StrCat("pids/", name, ".pid"), std::to_string(pid));
}

void Session::ForgetDaemon(const std::string& name) const {
  unlink(absl::StrCat(dir_, "/pids/", name, ".pid").c_str());
}

std::vector<DaemonRecord> Session::LiveDaemons() const {
  std::vector<DaemonRecord> live;
  if (DIR* dir = opendir((dir_ + "/pids").c_str())) {
    while (dirent* entry = readdir(dir)) {
      std::string file = entry->d_name;
      if (!absl::EndsWith(file, ".pid")) continue;
      std::string name = file.substr(0, file.size() - 4);
      auto text = ReadFile("pids/" + file);
      int pid;
      if (text.ok() && absl::SimpleAtoi(*text, &pid) && ProcessMatches(pid, dir_)) {
        live.push_back({name, pid});
      }
    }
    closedir(dir);
  }
  std::sort(live.begin(), live.end(),
            [](const DaemonRecord& a, const DaemonRecord& b) { return a.name < b.name; });
  return live;
}

absl::Status Session::MarkLatest() const {
  std::string root = dir_.substr(0, dir_.rfind('/'));
  std::string link = root + "/session_latest";
  std::string tmp = link + ".tmp";
  unlink(tmp.c_str());
  if (symlink(dir_.c_str(), tmp.c_str()) != 0 || rename(tmp.c_str(), link.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot update ", link, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string ObjectStoreDirOf(const Session& session) {
  std::string name = session.dir().substr(session.dir().rfind('/') + 1);
  return absl::StrCat("/dev/shm/troupe-", name);
}

bool ProcessMatches(int pid, const std::string& marker) {
  if (pid <= 0) return false;
  bool ok;
  std::string cmdline = ReadWhole(absl::StrCat("/proc/", pid, "/cmdline"), &ok);
  if (!ok) return false;
  // A zombie (exited, not yet reaped) has an empty command line: it is not running.
  return absl::StrContains(cmdline, marker);
}

}  // namespace troupe
