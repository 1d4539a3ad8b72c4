// `troupe train launch`: runs an existing distributed training script (PyTorch DDP, ...) as N
// gang-scheduled processes, torchrun-style. One placement-group bundle per rank; in each, a
// LaunchRank actor starts the command with the variables torchrun sets (MASTER_ADDR/PORT,
// WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK) plus CUDA_VISIBLE_DEVICES and
// OMP_NUM_THREADS, and streams its output prefixed with the rank. When a rank fails, the others
// are stopped; the group restarts up to --max-failures times; the exit status is the failing
// rank's.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/cli/commands.h"
#include "src/common/cluster_target.h"
#include "src/common/flag_parser.h"
#include "src/common/gpu_devices.h"
#include "src/common/session.h"
#include "src/tls/tls_files.h"
#include "troupe/api.h"

namespace troupe {
namespace {

// The name of the network interface that holds IPv4 address `ip`, or "".
std::string InterfaceOf(const std::string& ip) {
  ifaddrs* addresses = nullptr;
  if (getifaddrs(&addresses) != 0) return "";
  std::string name;
  for (ifaddrs* a = addresses; a != nullptr && name.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    const auto* address = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &address->sin_addr, text, sizeof(text)) && ip == text) {
      name = a->ifa_name;
    }
  }
  freeifaddrs(addresses);
  return name;
}

// Runs in a worker: one rank of the launched command.
class LaunchRank {
 public:
  static LaunchRank* Create() { return new LaunchRank(); }

  // {node id, node IP, the CUDA_VISIBLE_DEVICES showing the rank its leased GPUs ("" for none),
  // the interface holding the node IP ("" if none)}.
  std::vector<std::string> Where() {
    std::string gpus;
    for (int id : GetGpuIds()) absl::StrAppend(&gpus, gpus.empty() ? "" : ",", id);
    // The lease is the raylet's GPU indices: map them through the devices the raylet sees.
    const std::string visible = ChildVisibleDevices(gpus, std::getenv("TROUPE_GPU_VISIBILITY"),
                                                    std::getenv("CUDA_VISIBLE_DEVICES"));
    const char* node = std::getenv("TROUPE_NODE_ID");
    const char* ip = std::getenv("TROUPE_NODE_IP");
    const std::string node_ip = ip ? ip : "127.0.0.1";
    return {node ? node : "", node_ip, visible, InterfaceOf(node_ip)};
  }

  // A TCP port free on this node a moment ago (rank 0's MASTER_PORT).
  int FreePort() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    socklen_t length = sizeof(addr);
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0) {
      port = ntohs(addr.sin_port);
    }
    close(fd);
    return port;
  }

  // Runs `argv` with `env` added (and Troupe's own variables removed), printing its output line
  // by line as "[rank R] ..."; returns its exit status (128 + signal if killed).
  int Run(std::vector<std::string> argv, std::vector<std::string> env, int rank) {
    int out[2];
    if (pipe(out) != 0) throw TroupeError(std::string("pipe: ") + std::strerror(errno));
    // This worker's environment without Troupe's variables, overridden by `env`.
    std::map<std::string, std::string> merged;
    for (char** e = environ; *e; ++e) {
      const std::string entry = *e;
      if (entry.rfind("TROUPE_", 0) != 0) merged[entry.substr(0, entry.find('='))] = entry;
    }
    for (auto& entry : env) merged[entry.substr(0, entry.find('='))] = entry;
    std::vector<std::string> environment;
    for (auto& [name, entry] : merged) environment.push_back(entry);
    std::vector<char*> args, envp;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    for (auto& e : environment) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) throw TroupeError(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // the rank dies with this worker (stopped or killed)
      if (getppid() != parent) _exit(137);
      dup2(out[1], STDOUT_FILENO);
      dup2(out[1], STDERR_FILENO);
      close(out[0]);
      close(out[1]);
      execvpe(args[0], args.data(), envp.data());
      std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
      _exit(127);
    }
    close(out[1]);
    FILE* stream = fdopen(out[0], "r");
    char* line = nullptr;
    size_t capacity = 0;
    while (getline(&line, &capacity, stream) > 0) {
      std::printf("[rank %d] %s", rank, line);
      if (line[std::strlen(line) - 1] != '\n') std::printf("\n");
      std::fflush(stdout);
    }
    free(line);
    fclose(stream);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

}  // namespace
}  // namespace troupe

TROUPE_REMOTE(troupe::LaunchRank::Create, &troupe::LaunchRank::Where, &troupe::LaunchRank::FreePort,
              &troupe::LaunchRank::Run);

namespace troupe {

int TrainLaunchCommand(const std::vector<std::string>& all_args) {
  auto dashes = std::find(all_args.begin(), all_args.end(), "--");
  const std::vector<std::string> args(all_args.begin(), dashes);
  const std::vector<std::string> command(dashes == all_args.end() ? dashes : dashes + 1,
                                         all_args.end());
  int64_t num_workers = 1, gpus = 0, cpus = 1, max_failures = 0;
  std::string address, token, working_dir, temp_dir;
  FlagParser flags("troupe train launch",
                   "Runs CMD as N gang-scheduled ranks with torchrun's environment (MASTER_ADDR, "
                   "MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK) plus "
                   "CUDA_VISIBLE_DEVICES and OMP_NUM_THREADS:\n  troupe train launch "
                   "--num-workers 2 -- python3 train.py --epochs 3");
  flags.AddInt("num-workers", &num_workers, "Ranks to start.");
  flags.AddInt("gpus-per-worker", &gpus, "GPUs per rank.");
  flags.AddInt("cpus-per-worker", &cpus, "CPUs per rank (also OMP_NUM_THREADS).");
  flags.AddInt("max-failures", &max_failures, "Restarts of the whole group after a failure.");
  flags.AddString("working-dir", &working_dir,
                  "Directory copied to every node; ranks start inside it.");
  flags.AddString("address", &address,
                  "Cluster (default: $TROUPE_ADDRESS, else the local one, "
                  "else an embedded single-node cluster).");
  flags.AddString("token", &token, "Cluster token (default: $TROUPE_TOKEN or the local one).");
  flags.AddString("temp-dir", &temp_dir,
                  "Root of session directories (default: $TROUPE_TEMP_DIR or /tmp/troupe).");
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "troupe train launch: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  if (command.empty()) {
    std::fprintf(stderr,
                 "troupe train launch: no command: put it after --, e.g. "
                 "`troupe train launch --num-workers 2 -- python3 train.py`\n");
    return 2;
  }
  if (num_workers < 1 || cpus < 1 || gpus < 0) {
    std::fprintf(stderr,
                 "troupe train launch: --num-workers and --cpus-per-worker must be >= 1, "
                 "--gpus-per-worker >= 0\n");
    return 2;
  }
  Config config;
  config.working_dir = working_dir;
  auto target = ResolveClusterTarget(address, token, ResolveTempRoot(temp_dir));
  if (target.ok()) {
    config.address = target->address;
    config.token = target->token;
    // Init resolves the cluster again (without --temp-dir): hand it the TLS files found here.
    if (!target->tls_dir.empty()) setenv(kTlsDirEnv, target->tls_dir.c_str(), 1);
  } else if (!address.empty()) {
    std::fprintf(stderr, "troupe train launch: %s\n",
                 std::string(target.status().message()).c_str());
    return 1;
  } else {
    std::fprintf(stderr,
                 "troupe train launch: no running cluster found; using an embedded "
                 "single-node cluster\n");
  }
  try {
    Init(config);
  } catch (const TroupeError& e) {
    std::fprintf(stderr, "troupe train launch: %s\n", e.what());
    return 1;
  }
  std::map<std::string, double> bundle = {{"CPU", static_cast<double>(cpus)}};
  if (gpus > 0) bundle["GPU"] = static_cast<double>(gpus);

  int exit_code = 0;
  for (int attempt = 0;; ++attempt) {
    std::string failure;
    PlacementGroup group =
        CreatePlacementGroup({"", std::vector<std::map<std::string, double>>(num_workers, bundle),
                              PlacementStrategy::kPack});
    if (!group.Wait(std::chrono::seconds(60))) {
      std::fprintf(stderr,
                   "troupe train launch: cannot place %lld ranks of %lld CPU / %lld GPU "
                   "within 60 s: the cluster lacks the resources\n",
                   static_cast<long long>(num_workers), static_cast<long long>(cpus),
                   static_cast<long long>(gpus));
      RemovePlacementGroup(group);
      Shutdown();
      return 1;
    }
    std::vector<ActorHandle<LaunchRank>> ranks;
    try {
      // Rank order: by node (in bundle order), then bundle.
      std::vector<ActorHandle<LaunchRank>> placed;
      std::vector<std::vector<std::string>> where;
      for (int i = 0; i < num_workers; ++i) {
        placed.push_back(
            Actor(LaunchRank::Create).SetResources(bundle).SetPlacementGroup(group, i).Remote());
      }
      for (auto& actor : placed) where.push_back(*Get(actor.Task(&LaunchRank::Where).Remote()));
      std::map<std::string, int> node_index;
      std::vector<int> order(num_workers);
      for (int i = 0; i < num_workers; ++i) {
        order[i] = i;
        node_index.emplace(where[i][0], static_cast<int>(node_index.size()));
      }
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return node_index[where[a][0]] < node_index[where[b][0]];
      });
      std::map<std::string, int> local_count, local_next;
      for (int i : order) ++local_count[where[i][0]];
      for (int i : order) ranks.push_back(placed[i]);
      const std::string master_addr = where[order[0]][1];
      const int master_port = *Get(ranks[0].Task(&LaunchRank::FreePort).Remote());
      // Ranks see the launcher's environment (as with torchrun), minus Troupe's own variables
      // and the shell's bookkeeping, plus the variables below.
      std::vector<std::string> inherited;
      bool gloo_interface_given = false;
      for (char** e = environ; *e; ++e) {
        const std::string entry = *e;
        const std::string name = entry.substr(0, entry.find('='));
        if (name.rfind("TROUPE_", 0) == 0 || name == "PWD" || name == "OLDPWD" || name == "SHLVL" ||
            name == "_") {
          continue;
        }
        gloo_interface_given |= name == "GLOO_SOCKET_IFNAME";
        inherited.push_back(entry);
      }
      std::vector<ObjectRef<int>> runs;
      for (int rank = 0; rank < num_workers; ++rank) {
        const auto& w = where[order[rank]];
        std::vector<std::string> env = inherited;
        env.insert(env.end(), {
                                  "MASTER_ADDR=" + master_addr,
                                  absl::StrCat("MASTER_PORT=", master_port),
                                  absl::StrCat("WORLD_SIZE=", num_workers),
                                  absl::StrCat("RANK=", rank),
                                  absl::StrCat("LOCAL_RANK=", local_next[w[0]]++),
                                  absl::StrCat("LOCAL_WORLD_SIZE=", local_count[w[0]]),
                                  absl::StrCat("NODE_RANK=", node_index[w[0]]),
                                  absl::StrCat("OMP_NUM_THREADS=", cpus),
                                  "CUDA_VISIBLE_DEVICES=" + w[2],
                              });
        // gloo listens on the address the host name resolves to, often 127.0.1.1 (Debian's
        // /etc/hosts), and tells the other ranks to connect there: pin it to the interface of
        // the node's address, the one the other nodes reach.
        if (!gloo_interface_given && !w[3].empty()) env.push_back("GLOO_SOCKET_IFNAME=" + w[3]);
        runs.push_back(ranks[rank].Task(&LaunchRank::Run).Remote(command, env, rank));
      }
      std::vector<bool> done(num_workers, false);
      int finished = 0;
      while (finished < num_workers && failure.empty()) {
        std::vector<ObjectRef<int>> pending;
        for (int r = 0; r < num_workers; ++r) {
          if (!done[r]) pending.push_back(runs[r]);
        }
        std::set<std::string> ready;
        for (const auto& ref : Wait(pending, 1, std::chrono::milliseconds(200)).ready) {
          ready.insert(ref.ID());
        }
        for (int r = 0; r < num_workers && failure.empty(); ++r) {
          if (done[r] || !ready.count(runs[r].ID())) continue;
          done[r] = true;
          ++finished;
          try {
            const int code = *Get(runs[r]);
            if (code != 0) {
              failure = absl::StrCat("rank ", r, " exited with status ", code);
              exit_code = code;
            }
          } catch (const TroupeError& e) {
            failure = absl::StrCat("rank ", r, " was lost: ", e.what());
            exit_code = 1;
          }
        }
      }
    } catch (const TroupeError& e) {
      failure = std::string("starting the ranks failed: ") + e.what();
      exit_code = 1;
    }
    // Stop every rank (their processes die with their workers) and free the bundles.
    for (auto& rank : ranks) rank.Kill();
    RemovePlacementGroup(group);
    if (failure.empty()) {
      exit_code = 0;
      break;
    }
    std::fprintf(stderr, "troupe train launch: %s; stopped the other ranks\n", failure.c_str());
    if (attempt >= max_failures) break;
    std::fprintf(stderr, "troupe train launch: restarting all ranks (%d of %lld restarts)\n",
                 attempt + 1, static_cast<long long>(max_failures));
  }
  std::fflush(stdout);
  Shutdown();
  return exit_code;
}

}  // namespace troupe
