#include "tests/netns_cluster.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace troupe::testing {
namespace {

constexpr int kHeadPort = 6380;  // every node has its own port space: fixed ports cannot clash
constexpr int kHttpPort = 8265;

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir && workspace) return absl::StrCat(srcdir, "/", workspace, "/", path);
  return path;
}

std::string NetnsScriptPath() { return Runfile("scripts/netns.sh"); }

std::string TestTmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir ? dir : "/tmp";
}

// "nt" + the pid in base 36 (at most 5 characters) + a per-process counter: unique among the
// processes on this machine, and within netns.sh's 8-character limit.
std::string UniquePrefix() {
  static std::atomic<int> counter{0};
  constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string pid;
  for (long n = getpid(); n > 0; n /= 36) pid.insert(pid.begin(), kDigits[n % 36]);
  return absl::StrCat("nt", pid, std::string(1, kDigits[counter++ % 36]));
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Describe(const std::vector<std::string>& argv, const CommandResult& result) {
  return absl::StrCat("`", absl::StrJoin(argv, " "), "` exited with ", result.exit_code,
                      "\nstdout:\n", result.out, "\nstderr:\n", result.err);
}

// The value after "Node ID:" in `troupe start` output, or "".
std::string PrintedNodeId(const std::string& out) {
  const std::string marker = "Node ID:";
  const size_t at = out.find(marker);
  if (at == std::string::npos) return "";
  const size_t start = at + marker.size();
  return std::string(absl::StripAsciiWhitespace(out.substr(start, out.find('\n', start) - start)));
}

}  // namespace

std::string NetnsCluster::Check() {
  CommandResult result = RunCommand({"/bin/bash", NetnsScriptPath(), "check"});
  if (result.exit_code == 0) return "";
  return absl::StrCat("network namespaces unavailable: ",
                      absl::StripAsciiWhitespace(result.out + result.err));
}

NetnsCluster::NetnsCluster(std::string prefix, std::string temp_root)
    : prefix_(std::move(prefix)), temp_root_(std::move(temp_root)) {
  RegisterCleanupCommand({"/bin/bash", NetnsScriptPath(), "down", prefix_});
}

absl::StatusOr<std::unique_ptr<NetnsCluster>> NetnsCluster::Start(const Options& options) {
  const std::string prefix = UniquePrefix();
  std::unique_ptr<NetnsCluster> cluster(
      new NetnsCluster(prefix, absl::StrCat(TestTmpDir(), "/netns_", prefix)));
  std::vector<std::string> up = {"up", prefix, std::to_string(options.num_nodes)};
  if (options.private_shm) up.push_back("--private-shm");
  cluster->up_ = true;  // tear down whatever part `up` made, even if it failed
  CommandResult result = cluster->NetnsScript(up);
  if (result.exit_code != 0) {
    return absl::InternalError(absl::StrCat("netns.sh ", Describe(up, result)));
  }
  if (absl::Status started = cluster->StartNodes(options); !started.ok()) return started;
  return cluster;
}

std::vector<std::string> NetnsCluster::StartFlags(int i, const Options& options) const {
  std::vector<std::string> flags = {"start", "--node-ip-address=" + NodeIp(i)};
  if (i == 1) {
    flags.insert(flags.end(), {"--head", absl::StrCat("--port=", kHeadPort),
                               absl::StrCat("--http-port=", kHttpPort)});
  } else {
    // What the head's join_command says: address, token and the CA pin.
    flags.insert(flags.end(), {"--address=" + GcsAddress(), "--token=" + token_,
                               "--ca-cert-hash=" + ca_cert_hash_});
  }
  flags.insert(flags.end(), options.node_flags.begin(), options.node_flags.end());
  return flags;
}

absl::Status NetnsCluster::StartNodes(const Options& options) {
  for (int i = 1; i <= options.num_nodes; ++i) {
    std::filesystem::create_directories(TempDir(i));
    const std::vector<std::string> args = StartFlags(i, options);
    CommandResult result = TroupeOn(i, args);
    const std::string node_id = PrintedNodeId(result.out);
    if (result.exit_code != 0 || node_id.empty()) {
      return absl::InternalError(absl::StrCat("on node ", i, ": troupe ", Describe(args, result)));
    }
    node_ids_.push_back(node_id);
    if (i == 1) {
      token_ = std::string(
          absl::StripAsciiWhitespace(ReadFileOrEmpty(TempDir(1) + "/session_latest/token")));
      if (token_.empty()) return absl::InternalError("the head started but wrote no token");
      const std::string join = ReadFileOrEmpty(TempDir(1) + "/session_latest/join_command");
      const size_t pin = join.find("--ca-cert-hash=");
      if (pin == std::string::npos) {
        return absl::InternalError("the head wrote no join_command with a CA pin: '" + join + "'");
      }
      ca_cert_hash_ = join.substr(pin + strlen("--ca-cert-hash="));
      ca_cert_hash_ = ca_cert_hash_.substr(0, ca_cert_hash_.find_first_of(" \n"));
    }
  }
  return absl::OkStatus();
}

NetnsCluster::~NetnsCluster() {
  if (!up_) return;
  // `down` SIGKILLs every process of every node and removes the namespaces (and private /dev/shm
  // mounts); a failure here is reported but cannot stop the teardown half-way.
  CommandResult result = NetnsScript({"down", prefix_});
  if (result.exit_code != 0) {
    ADD_FAILURE() << "netns.sh down " << prefix_ << " failed: " << result.out << result.err;
  }
  // With every process gone, `troupe stop` removes what the SIGKILLed nodes left in the host's
  // /dev/shm (their object stores, when the nodes share it; a private one went with its mount).
  for (size_t i = 1; i <= node_ids_.size(); ++i) {
    RunTroupe({"stop", "--force", "--temp-dir=" + TempDir(static_cast<int>(i))});
  }
  std::error_code ignored;
  // A failed test keeps every node's logs among its outputs (test.outputs/outputs.zip).
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  if (::testing::Test::HasFailure() && outputs != nullptr) {
    std::filesystem::copy(temp_root_, absl::StrCat(outputs, "/netns_", prefix_),
                          std::filesystem::copy_options::recursive, ignored);
  }
  std::filesystem::remove_all(temp_root_, ignored);
}

std::string NetnsCluster::NodeIp(int i) const { return absl::StrCat("10.99.0.", i); }
std::string NetnsCluster::GcsAddress() const { return absl::StrCat(NodeIp(1), ":", kHeadPort); }
std::string NetnsCluster::HttpAddress() const {
  return absl::StrCat("https://", NodeIp(1), ":", kHttpPort);
}
std::string NetnsCluster::TempDir(int i) const { return absl::StrCat(temp_root_, "/n", i); }

CommandResult NetnsCluster::NetnsScript(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"/bin/bash", NetnsScriptPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

CommandResult NetnsCluster::RunOn(int i, const std::vector<std::string>& argv,
                                  const std::vector<std::string>& env, int timeout_s) const {
  std::vector<std::string> command = {
      "/bin/bash", NetnsScriptPath(), "exec", prefix_, std::to_string(i),
      "--",        "timeout",         "-s",   "KILL",  std::to_string(timeout_s)};
  command.insert(command.end(), argv.begin(), argv.end());
  std::vector<std::string> full_env = env;
  const std::string tls_dir = TempDir(i) + "/session_latest/tls";
  if (std::filesystem::exists(tls_dir + "/ca.pem")) full_env.push_back("TROUPE_TLS_DIR=" + tls_dir);
  return RunCommand(command, full_env);
}

CommandResult NetnsCluster::TroupeOn(int i, std::vector<std::string> args) const {
  if (!args.empty() && (args[0] == "start" || args[0] == "stop" || args[0] == "status")) {
    args.insert(args.begin() + 1, "--temp-dir=" + TempDir(i));
  }
  args.insert(args.begin(), TroupeBinary());
  return RunOn(i, args);
}

nlohmann::json NetnsCluster::Status() const {
  CommandResult result = TroupeOn(1, {"status", "--format=json"});
  if (result.exit_code != 0) return nullptr;
  auto parsed = nlohmann::json::parse(result.out, nullptr, false);
  return parsed.is_discarded() ? nlohmann::json(nullptr) : parsed;
}

std::string NetnsCluster::NodeState(int i) const {
  nlohmann::json node = FindNode(Status(), NodeId(i));
  return node.is_null() ? "" : node.value("state", "");
}

absl::Status NetnsCluster::SetLink(int i, bool up) {
  const std::vector<std::string> args = {"link", prefix_, std::to_string(i), up ? "up" : "down"};
  CommandResult result = NetnsScript(args);
  if (result.exit_code == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("netns.sh ", Describe(args, result)));
}

absl::Status NetnsCluster::KillNode(int i) {
  const std::vector<std::string> args = {"kill", prefix_, std::to_string(i)};
  CommandResult result = NetnsScript(args);
  if (result.exit_code == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("netns.sh ", Describe(args, result)));
}

std::vector<int> NetnsCluster::ProcessesOn(int i) const {
  CommandResult result = NetnsScript({"pids", prefix_, std::to_string(i)});
  std::vector<int> pids;
  for (absl::string_view line : absl::StrSplit(result.out, '\n', absl::SkipWhitespace())) {
    int pid;
    if (absl::SimpleAtoi(line, &pid)) pids.push_back(pid);
  }
  return pids;
}

}  // namespace troupe::testing
