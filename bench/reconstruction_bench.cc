// Troupe's side of the reconstruction benchmark (bench/reconstruction_bench.py runs it against a
// real two-node cluster started with the CLI, and Ray doing the same). A task pinned (softly) to
// the worker node makes a large object there; once it exists, this driver SIGKILLs that node's
// raylet (its workers die with it) and times `Get` of the object: node-death detection, the
// owner noticing the only copy is gone, re-running the creating task on the surviving node, and
// reading the value. Prints one JSON line per iteration and one for the median:
//   {"metric": "node_death_to_reconstructed_get", "value": <seconds>, "unit": "s"}
// Usage (TROUPE_ADDRESS/TROUPE_TOKEN set): reconstruction_bench --node=<node id hex>
//   --raylet-pid=<pid> [--bytes=N]
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "troupe/api.h"

namespace {

// The bytes start with the ID of the node that made them, so the driver can tell a rebuilt
// value (made on the surviving node) from a copy that escaped the kill.
std::vector<uint8_t> MakeBytes(int64_t size) {
  std::vector<uint8_t> bytes(size, 7);
  const std::string node = std::getenv("TROUPE_NODE_ID");
  std::copy(node.begin(), node.begin() + std::min<size_t>(node.size(), bytes.size()),
            bytes.begin());
  return bytes;
}

std::string WhereAmI() { return std::getenv("TROUPE_NODE_ID"); }

// Runs on the node that should hold `bytes` and says whether they were made there (a read on
// the same node maps the object; nothing is copied to another node).
bool MadeHere(std::vector<uint8_t> bytes) {
  const std::string node = std::getenv("TROUPE_NODE_ID");
  return bytes.size() >= node.size() && std::equal(node.begin(), node.end(), bytes.begin());
}

TROUPE_REMOTE(MakeBytes, WhereAmI, MadeHere);

using troupe::bench::FlagValue;

}  // namespace

int main(int argc, char** argv) {
  troupe::Init(argc, argv);
  const std::string node = FlagValue(argc, argv, "node", "");
  const int raylet_pid = std::stoi(FlagValue(argc, argv, "raylet-pid", "0"));
  const int64_t bytes = std::stoll(FlagValue(argc, argv, "bytes", std::to_string(10 << 20)));
  if (node.empty() || raylet_pid <= 0) {
    std::fprintf(stderr, "usage: reconstruction_bench --node=ID --raylet-pid=PID [--bytes=N]\n");
    return 2;
  }
  // The node must be in the scheduler's view before the soft affinity can pick it.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (*troupe::Get(troupe::Task(WhereAmI)
                          .SetSchedulingStrategy(troupe::NodeAffinity{node, /*soft=*/true})
                          .Remote()) != node) {
    if (std::chrono::steady_clock::now() > give_up) {
      std::fprintf(stderr, "node %s never took a task\n", node.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the next resource report
  }
  auto object = troupe::Task(MakeBytes)
                    .SetSchedulingStrategy(troupe::NodeAffinity{node, /*soft=*/true})
                    .Remote(bytes);
  troupe::Wait(std::vector<troupe::ObjectRef<std::vector<uint8_t>>>{object}, 1);
  if (!*troupe::Get(troupe::Task(MadeHere)
                        .SetSchedulingStrategy(troupe::NodeAffinity{node, /*soft=*/false})
                        .Remote(object))) {
    std::fprintf(stderr, "the object was not made on node %s\n", node.c_str());
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  if (kill(raylet_pid, SIGKILL) != 0) {
    std::perror("kill");
    return 1;
  }
  auto value = troupe::Get(object, std::chrono::seconds(120));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (value->size() != static_cast<size_t>(bytes)) {
    std::fprintf(stderr, "wrong size %zu\n", value->size());
    return 1;
  }
  if (std::string(value->begin(), value->begin() + node.size()) == node) {
    std::fprintf(stderr, "the value was made on the killed node: it was not rebuilt\n");
    return 1;
  }
  std::printf(
      "{\"metric\": \"node_death_to_reconstructed_get\", \"value\": %.3f, \"unit\": \"s\"}\n",
      seconds);
  troupe::Shutdown();
  return 0;
}
