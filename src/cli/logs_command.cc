// `troupe logs`: lists and prints the log files of any node through the head's HTTP API
// (/api/v0/logs, /api/v0/logs/file: each node's raylet serves its own logs directory), picks a
// worker's log by actor, pid or task, and follows a file. With no head answering it falls back
// to this machine's files (every local session under the temp root), saying so.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/cli/commands.h"
#include "src/cli/http_api.h"
#include "src/common/flag_parser.h"
#include "src/common/ids.h"
#include "src/common/session.h"

namespace troupe {
namespace {

using nlohmann::json;

int Fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "troupe logs: %s\n", message.c_str());
  return code;
}

// The marker a worker writes to its stdout and stderr as a task starts (task_executor.cc).
constexpr char kTaskMarker[] = ":troupe task ";

// This machine's log files (the fallback when no head answers).
int LocalLogs(const std::string& temp_dir, const std::string& name, const std::string& why) {
  std::fprintf(stderr, "troupe logs: %s; showing this machine's log files instead\n", why.c_str());
  std::vector<std::string> files;
  for (const auto& session : Session::All(ResolveTempRoot(temp_dir))) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(session.dir() + "/logs", error)) {
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    return Fail("no Troupe log files under " + ResolveTempRoot(temp_dir) +
                ": no node was started on this machine with this temp root (pass "
                "--temp-dir=DIR or set TROUPE_TEMP_DIR to the one `troupe start` used)");
  }
  int printed = 0;
  for (const auto& file : files) {
    if (name.empty()) {
      std::printf("%s\n", file.c_str());
      continue;
    }
    if (!absl::StrContains(std::filesystem::path(file).filename().string(), name)) continue;
    std::printf("==> %s <==\n", file.c_str());
    std::ifstream in(file);
    std::cout << in.rdbuf() << std::flush;
    ++printed;
  }
  if (!name.empty() && printed == 0) {
    return Fail("no log file here matches '" + name +
                "' (worker logs live on the node that ran the worker)");
  }
  return 0;
}

std::string Query(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out;
  for (const auto& [k, v] : params) {
    absl::StrAppend(&out, out.empty() ? "?" : "&", k, "=", httplib::detail::encode_query_param(v));
  }
  return out;
}

// A worker's log: which node, which file.
struct Target {
  std::string node_id;
  std::string filename;
};

// Finds the worker log of the actor, pid or task asked for; an error message otherwise.
bool ResolveWorker(const ApiTarget& api, const std::string& actor_id, int64_t pid,
                   const std::string& task_id, const std::string& node_flag, Target* target,
                   std::string* error) {
  std::string worker_id, node_id = node_flag;
  if (!actor_id.empty()) {
    Response actors = Call(api, "GET", "/api/v0/actors");
    if (actors.status != 200) return *error = Problem(actors), false;
    for (const auto& a : actors.body) {
      if (absl::StartsWith(a.value("actor_id", ""), actor_id)) {
        worker_id = a.value("worker_id", "");
        node_id = a.value("node_id", "");
      }
    }
    if (worker_id.empty()) return *error = "no actor with an ID starting with " + actor_id, false;
  } else if (!task_id.empty()) {
    // Every task the head keeps (limit=0), not the first page: a whole ID by filter.
    std::vector<std::pair<std::string, std::string>> params = {{"detail", "true"}, {"limit", "0"}};
    if (task_id.size() == 2 * TaskId::Size()) {
      params.emplace_back("filter", "task_id=" + absl::AsciiStrToLower(task_id));
    }
    Response tasks = Call(api, "GET", "/api/v0/tasks" + Query(params));
    if (tasks.status == 404) {
      return *error =
                 "this head does not track tasks (older version): cannot find the worker "
                 "that ran task " +
                 task_id,
             false;
    }
    if (tasks.status != 200) return *error = Problem(tasks), false;
    json rows = tasks.body.is_array() ? tasks.body : tasks.body.value("result", json::array());
    for (const auto& t : rows) {
      if (absl::StartsWith(t.value("task_id", ""), absl::AsciiStrToLower(task_id)) &&
          !t.value("worker_id", "").empty()) {
        worker_id = t.value("worker_id", "");
        node_id = t.value("node_id", "");
      }
    }
    if (worker_id.empty()) {
      return *error = "no task with an ID starting with " + task_id + " has run on a worker", false;
    }
  }
  Response workers = Call(api, "GET", "/api/v0/workers");
  if (workers.status == 200) {
    for (const auto& w : workers.body.value("result", json::array())) {
      const bool match = pid > 0 ? w.value("pid", 0) == pid : w.value("worker_id", "") == worker_id;
      if (match && (node_flag.empty() || absl::StartsWith(w.value("node_id", ""), node_flag))) {
        *target = {w.value("node_id", ""), w.value("log_file", "")};
        return true;
      }
    }
  }
  if (pid > 0) return *error = absl::StrCat("no live worker with pid ", pid), false;
  // A worker that exited: its log is still there, named by its ID.
  *target = {node_id, "worker-" + worker_id.substr(0, 8) + ".log"};
  return true;
}

// Reads a chunk; false (and prints why) on failure.
bool ReadChunk(const ApiTarget& api, const Target& target, int64_t offset, int64_t lines,
               json* chunk) {
  Response r = Call(api, "GET",
                    "/api/v0/logs/file" + Query({{"node_id", target.node_id},
                                                 {"filename", target.filename},
                                                 {"offset", std::to_string(offset)},
                                                 {"lines", std::to_string(lines)}}));
  if (r.status != 200) {
    Fail(Problem(r));
    return false;
  }
  *chunk = r.body;
  return true;
}

// Prints the file (whole, or its last `tail` lines), then with `follow` what is appended,
// polling every 0.5 s until interrupted. `only_task`: print only that task's sections.
int PrintFile(const ApiTarget& api, const Target& target, int64_t tail, bool follow,
              const std::string& only_task) {
  json chunk;
  if (!ReadChunk(api, target, 0, tail, &chunk)) return 1;
  bool in_task = false;
  std::string partial;  // an unfinished line when filtering by task
  auto emit = [&](const std::string& data) {
    if (only_task.empty()) {
      std::fwrite(data.data(), 1, data.size(), stdout);
      std::fflush(stdout);
      return;
    }
    partial += data;
    size_t start = 0;
    for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      const std::string line = partial.substr(start, nl - start);
      if (absl::StartsWith(line, kTaskMarker)) {
        in_task = absl::StartsWith(line.substr(sizeof(kTaskMarker) - 1), only_task);
        continue;
      }
      if (in_task) std::printf("%s\n", line.c_str());
    }
    partial.erase(0, start);
    std::fflush(stdout);
  };
  emit(chunk.value("data", ""));
  int64_t offset = chunk.value("next_offset", int64_t{0});
  // A file longer than one reply: read on to its end.
  while (tail == 0 && offset < chunk.value("size", int64_t{0})) {
    if (!ReadChunk(api, target, offset, 0, &chunk)) return 1;
    if (chunk.value("data", "").empty()) break;
    emit(chunk.value("data", ""));
    offset = chunk.value("next_offset", offset);
  }
  while (follow) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (!ReadChunk(api, target, offset, 0, &chunk)) return 1;
    emit(chunk.value("data", ""));
    offset = chunk.value("next_offset", offset);
  }
  return 0;
}

}  // namespace

int LogsCommand(const std::vector<std::string>& args) {
  ApiFlags api_flags;
  std::string node_id, actor_id, task_id;
  int64_t tail = 0, pid = 0;
  bool follow = false;
  FlagParser flags(
      "troupe logs",
      "Lists the log files of every node (daemons and workers), or prints one:\n"
      "  troupe logs                               every node's files\n"
      "  troupe logs --node-id 3fa2                one node's files\n"
      "  troupe logs raylet.log --node-id 3fa2 --tail 100 --follow\n"
      "  troupe logs --actor-id 8c1e               the log of the worker holding the actor\n"
      "  troupe logs --pid 4242                    the log of the worker with that pid\n"
      "  troupe logs --task-id 5d0b                what that task printed (see docs/cli.md)\n"
      "  troupe logs --actor-id 8c1e --task-id 5d0b  that call's output in the actor's log\n"
      "A FILENAME that names no file exactly prints every file whose name contains it.\n"
      "With no head answering, lists and prints this machine's files.");
  api_flags.Register(&flags);
  flags.AddString("node-id", &node_id, "The node (an ID prefix; default: all, or the head).");
  flags.AddString("actor-id", &actor_id, "Print the log of the worker holding this actor.");
  flags.AddString("actor", &actor_id, "Same as --actor-id.");
  flags.AddInt("pid", &pid, "Print the log of the worker with this pid.");
  flags.AddString("task-id", &task_id, "Print only the output of this task.");
  flags.AddInt("tail", &tail, "Print only the last N lines (0: the whole file).");
  flags.AddBool("follow", &follow, "Keep printing what is appended (every 0.5 s) until ^C.");
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) return std::printf("%s", flags.Usage().c_str()), 0;
  if (!parsed.ok()) return Fail(std::string(parsed.message()), 2);
  if (flags.positional().size() > 1) return Fail("give at most one FILENAME", 2);
  if (tail < 0) return Fail("--tail must be >= 0", 2);
  // One file selector; --task-id alone finds its worker through /api/v0/tasks, and with a file
  // selector only filters that file.
  const int file_selectors = !actor_id.empty() + (pid > 0) + !flags.positional().empty();
  if (file_selectors > 1) return Fail("give one of FILENAME, --actor-id, --pid", 2);
  const std::string name = flags.positional().empty() ? "" : flags.positional()[0];
  std::string error;
  auto api = api_flags.Resolve(&error);
  if (!api) return LocalLogs(api_flags.temp_dir, name, error);
  if (name.empty() && (file_selectors == 1 || !task_id.empty())) {
    Target target;
    if (!ResolveWorker(*api, actor_id, pid, file_selectors == 1 ? "" : task_id, node_id, &target,
                       &error)) {
      return Fail(error);
    }
    return PrintFile(*api, target, tail, follow, task_id);
  }
  Response listing = Call(*api, "GET", "/api/v0/logs" + Query({{"node_id", node_id}}));
  if (!listing.error.empty()) return LocalLogs(api_flags.temp_dir, name, listing.error);
  if (listing.status != 200) return Fail(Problem(listing));
  for (const auto& node : listing.body.value("unreachable_nodes", json::array())) {
    std::fprintf(stderr, "troupe logs: warning: node %s (%s) did not answer: %s\n",
                 node.value("node_id", "?").c_str(), node.value("address", "?").c_str(),
                 node.value("error", "").c_str());
  }
  const json nodes = listing.body.value("nodes", json::array());
  if (name.empty()) {
    for (const auto& node : nodes) {
      std::printf("=== node %s (%s)%s ===\n", node.value("node_id", "").c_str(),
                  node.value("node_ip", "").c_str(),
                  node.value("is_head_node", false) ? " head" : "");
      for (const auto& file : node.value("files", json::array())) {
        std::printf("  %-40s %10lld\n", file.value("name", "").c_str(),
                    static_cast<long long>(file.value("size", int64_t{0})));
      }
    }
    return 0;
  }
  std::vector<Target> exact, partial;
  for (const auto& node : nodes) {
    for (const auto& file : node.value("files", json::array())) {
      const std::string file_name = file.value("name", "");
      if (file_name == name)
        exact.push_back({node.value("node_id", ""), file_name});
      else if (absl::StrContains(file_name, name))
        partial.push_back({node.value("node_id", ""), file_name});
    }
  }
  const std::vector<Target>& matches = exact.empty() ? partial : exact;
  if (matches.empty()) {
    return Fail("no log file " + std::string(node_id.empty() ? "on any node" : "on that node") +
                " matches '" + name + "' (`troupe logs` lists them)");
  }
  if (matches.size() == 1) return PrintFile(*api, matches[0], tail, follow, task_id);
  if (follow) {
    return Fail(absl::StrCat("'", name, "' matches ", matches.size(),
                             " files: --follow takes one (give --node-id and the full name)"),
                2);
  }
  for (const auto& target : matches) {
    std::printf("==> node %s: %s <==\n", target.node_id.c_str(), target.filename.c_str());
    if (int code = PrintFile(*api, target, tail, false, task_id); code != 0) return code;
  }
  return 0;
}

}  // namespace troupe
