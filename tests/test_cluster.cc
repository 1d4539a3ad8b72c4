#include "tests/test_cluster.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "src/common/wait_until.h"
#include "src/rpc/transport_security.h"
#include "src/tls/tls_files.h"

extern char** environ;

namespace troupe::testing {
namespace {

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string TestTmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir ? dir : "/tmp";
}

// If the test is killed (a Bazel timeout sends SIGTERM first), run every registered cleanup
// command (stop each cluster, remove namespaces) so nothing outlives it. Everything the handler
// touches is prepared in advance: it only forks and execs, which is allowed in a signal handler.
constexpr int kMaxCleanups = 64;
constexpr int kMaxCleanupArgs = 8;
char* cleanup_argv[kMaxCleanups][kMaxCleanupArgs + 1];
std::atomic<int> num_cleanups{0};

void RunCleanupsAndExit(int signal_number) {
  const int n = std::min(num_cleanups.load(), kMaxCleanups);
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      execv(cleanup_argv[i][0], cleanup_argv[i]);
      _exit(127);
    }
    if (pid > 0) waitpid(pid, nullptr, 0);
  }
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

}  // namespace

void RegisterCleanupCommand(const std::vector<std::string>& argv) {
  const int slot = num_cleanups.load();
  if (slot >= kMaxCleanups || argv.empty() || argv.size() > kMaxCleanupArgs) return;
  for (size_t i = 0; i < argv.size(); ++i) cleanup_argv[slot][i] = strdup(argv[i].c_str());
  cleanup_argv[slot][argv.size()] = nullptr;
  num_cleanups = slot + 1;
  static bool installed = [] {
    signal(SIGTERM, RunCleanupsAndExit);
    signal(SIGINT, RunCleanupsAndExit);
    return true;
  }();
  (void)installed;
}

std::string TroupeBinary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir && workspace) return absl::StrCat(srcdir, "/", workspace, "/src/cli/troupe");
  return "bazel-bin/src/cli/troupe";
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env) {
  static std::atomic<int> counter{0};
  const std::string base = absl::StrCat(TestTmpDir(), "/cmd_", getpid(), "_", counter++);
  const std::string out_path = base + ".out", err_path = base + ".err";

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> args_copy = argv;
  std::vector<char*> args;
  for (auto& arg : args_copy) args.push_back(arg.data());
  args.push_back(nullptr);
  std::vector<std::string> env_copy = env;
  std::vector<char*> envp;
  // Entries of `env` replace inherited ones of the same name.
  auto overridden = [&](const char* entry) {
    for (const auto& given : env) {
      const size_t eq = given.find('=');
      if (std::strncmp(entry, given.c_str(), eq + 1) == 0) return true;
    }
    return false;
  };
  for (char** e = environ; *e; ++e) {
    if (!overridden(*e)) envp.push_back(*e);
  }
  for (auto& entry : env_copy) envp.push_back(entry.data());
  envp.push_back(nullptr);

  pid_t pid;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return {127, "", absl::StrCat("cannot run ", argv[0], ": ", std::strerror(rc))};
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  return {WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus),
          ReadFileOrEmpty(out_path), ReadFileOrEmpty(err_path)};
}

CommandResult RunTroupe(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<std::string> argv = {TroupeBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, env);
}

std::vector<int> ProcessesMentioning(const std::string& marker) {
  std::vector<int> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* entry = readdir(proc)) {
    int pid;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    std::string cmdline = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/cmdline"));
    if (absl::StrContains(cmdline, marker)) pids.push_back(pid);
  }
  closedir(proc);
  return pids;
}

std::vector<std::string> CommandLineOf(int pid) {
  std::string cmdline = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/cmdline"));
  std::vector<std::string> args;
  for (size_t start = 0, end; start < cmdline.size(); start = end + 1) {
    end = cmdline.find('\0', start);
    if (end == std::string::npos) end = cmdline.size();
    args.push_back(cmdline.substr(start, end - start));
  }
  return args;
}

std::vector<std::string> TestCluster::RayletLogs() const {
  std::vector<std::string> logs;
  if (DIR* dir = opendir(temp_root_.c_str())) {
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (absl::StartsWith(name, "session_") && name != "session_latest") {
        logs.push_back(absl::StrCat(temp_root_, "/", name, "/logs/raylet.log"));
      }
    }
    closedir(dir);
  }
  return logs;
}

nlohmann::json FindNode(const nlohmann::json& status, const std::string& node_id) {
  for (const auto& node : status["nodes"]) {
    if (node["node_id"] == node_id) return node;
  }
  return nullptr;
}

int TestCluster::GcsPid() const {
  int pid = 0;
  std::string text(absl::StripAsciiWhitespace(ReadFileOrEmpty(HeadSessionDir() + "/pids/gcs.pid")));
  return absl::SimpleAtoi(text, &pid) ? pid : 0;
}

TestCluster::TestCluster(std::string temp_root) : temp_root_(std::move(temp_root)) {
  RegisterCleanupCommand({TroupeBinary(), "stop", "--force", "--temp-dir=" + temp_root_});
}

TestCluster::TestCluster(TestCluster&& other) noexcept
    : temp_root_(std::exchange(other.temp_root_, "")),
      gcs_address_(std::move(other.gcs_address_)),
      token_(std::move(other.token_)),
      tls_dir_(std::exchange(other.tls_dir_, "")),
      gcs_(std::move(other.gcs_)) {}

absl::StatusOr<TestCluster> TestCluster::Start(const std::vector<std::string>& head_flags) {
  static std::atomic<int> counter{0};
  TestCluster cluster(absl::StrCat(TestTmpDir(), "/cluster_", getpid(), "_", counter++));
  const int port = PickFreePort();
  std::vector<std::string> args = {"start", "--head", absl::StrCat("--port=", port)};
  args.insert(args.end(), head_flags.begin(), head_flags.end());
  // No HTTP server unless the test asks for one (tests run in parallel: 8265 would clash).
  bool http = false;
  for (const auto& flag : head_flags) http |= absl::StartsWith(flag, "--http-port");
  if (!http) args.push_back("--http-port=0");
  CommandResult result = cluster.Troupe(args);
  if (result.exit_code != 0) {
    // `cluster` stops whatever did start when it goes out of scope.
    return absl::InternalError(absl::StrCat("`troupe ", absl::StrJoin(args, " "), "` exited with ",
                                            result.exit_code, "\nstdout:\n", result.out,
                                            "\nstderr:\n", result.err));
  }
  cluster.gcs_address_ = absl::StrCat("127.0.0.1:", port);
  cluster.token_ =
      std::string(absl::StripAsciiWhitespace(ReadFileOrEmpty(cluster.HeadSessionDir() + "/token")));
  if (cluster.token_.empty()) {
    return absl::InternalError(absl::StrCat("the head started but wrote no token to ",
                                            cluster.HeadSessionDir(), "/token"));
  }
  const std::string tls_dir = TlsDirOf(cluster.HeadSessionDir());
  if (access(CaCertPath(tls_dir).c_str(), R_OK) == 0) {
    cluster.tls_dir_ = tls_dir;
    setenv(kTlsDirEnv, tls_dir.c_str(), 1);
    if (auto status = UseTlsDir(tls_dir); !status.ok()) return status;
  }
  cluster.gcs_ =
      std::make_unique<GcsClient>(cluster.gcs_address_, cluster.token_, absl::Seconds(5));
  return cluster;
}

std::string TestCluster::HttpAddress() const {
  return std::string(
      absl::StripAsciiWhitespace(ReadFileOrEmpty(HeadSessionDir() + "/http_address")));
}

TestCluster::~TestCluster() {
  if (temp_root_.empty()) return;  // moved from
  if (gcs_ != nullptr) {
    // Everything a test leased or reserved must have been given back: available == total on
    // every alive node (reports arrive every 100 ms, and job cleanup takes a moment).
    // (Skipped when the test took the head down.)
    nlohmann::json status;
    EXPECT_TRUE(WaitUntil(
        [&] {
          CommandResult result = Troupe({"status", "--format=json"});
          if (result.exit_code != 0) return true;  // the head is gone
          status = nlohmann::json::parse(result.out, nullptr, false);
          if (status.is_discarded() || !status.contains("nodes")) return false;
          for (const auto& node : status["nodes"]) {
            if (node["state"] == "ALIVE" &&
                node["resources_total"] != node["resources_available"]) {
              return false;
            }
          }
          return true;
        },
        absl::Seconds(5), "every node's resources to be available again", absl::Milliseconds(100)))
        << "resources leaked (available != total) after the test: " << status.dump(2);
  }
  Troupe({"stop", "--force"});
  // Nothing started for this cluster may outlive it.
  std::string left;  // which, so a failure says what outlived the cluster
  for (int pid : ProcessesMentioning(temp_root_)) {
    absl::StrAppend(&left, "\n  pid ", pid, ":");
    for (const auto& arg : CommandLineOf(pid)) absl::StrAppend(&left, " ", arg);
  }
  EXPECT_TRUE(left.empty()) << "processes left behind in " << temp_root_ << ":" << left;
  if (!tls_dir_.empty()) {
    unsetenv(kTlsDirEnv);
    SetTransportSecurity(std::nullopt);
  }
}

std::string TestCluster::HeadSessionDir() const {
  char target[4096];
  ssize_t n = readlink((temp_root_ + "/session_latest").c_str(), target, sizeof(target) - 1);
  if (n <= 0) return temp_root_ + "/session_latest";
  target[n] = '\0';
  return target;
}

CommandResult TestCluster::Troupe(std::vector<std::string> args) {
  if (!args.empty() && (args[0] == "start" || args[0] == "stop" || args[0] == "status")) {
    args.insert(args.begin() + 1, "--temp-dir=" + temp_root_);
  }
  return RunTroupe(args);
}

absl::StatusOr<std::string> TestCluster::AddWorker(const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"start", "--address=" + gcs_address_};
  args.insert(args.end(), flags.begin(), flags.end());
  CommandResult result = Troupe(args);
  const std::string marker = "Node ID:";
  const size_t at = result.out.find(marker);
  if (result.exit_code != 0 || at == std::string::npos) {
    return absl::InternalError(absl::StrCat("`troupe ", absl::StrJoin(args, " "), "` exited with ",
                                            result.exit_code,
                                            result.exit_code == 0 ? " but printed no Node ID" : "",
                                            "\nstdout:\n", result.out, "\nstderr:\n", result.err));
  }
  const size_t start = at + marker.size();
  return std::string(
      absl::StripAsciiWhitespace(result.out.substr(start, result.out.find('\n', start) - start)));
}

nlohmann::json TestCluster::Status() {
  CommandResult result = Troupe({"status", "--format=json"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  auto parsed = nlohmann::json::parse(result.out, nullptr, false);
  return parsed.is_discarded() ? nlohmann::json::object() : parsed;
}

}  // namespace troupe::testing
