// Troupe's side of the cross-node transfer benchmark (bench/transfer_bench.py runs it against a
// two-node cluster whose nodes sit in two network namespaces, with Ray doing the same). A task
// on the producer node makes an object of N bytes there; a task on the consumer node is handed
// a reference to it (inside a vector, so the task starts before the object moves) and times
// GetView of it there: the node-to-node transfer into the consumer's store plus mapping it.
// Prints one JSON line per size, with the median over the iterations:
//   {"bytes": N, "seconds": S, "gbps": G}
// Usage (TROUPE_ADDRESS/TROUPE_TOKEN set):
//   transfer_bench --producer=<node id hex> --consumer=<node id hex> [--sizes=1048576,...]
//   [--iterations=5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "troupe/api.h"

namespace {

using Bytes = std::vector<uint8_t>;

Bytes MakeBytes(int64_t size, int seed) { return Bytes(size, static_cast<uint8_t>(seed)); }

// Seconds to read the referenced object on this node; -1 if it came back wrong.
double TimeGet(std::vector<troupe::ObjectRef<Bytes>> refs, int64_t size, int seed) {
  const auto start = std::chrono::steady_clock::now();
  auto view = troupe::GetView(refs[0]);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Checked after the clock stops: first, middle and last byte.
  const uint8_t expect = static_cast<uint8_t>(seed);
  if (static_cast<int64_t>(view->size()) != size ||
      (size > 0 && (view->data()[0] != expect || view->data()[size / 2] != expect ||
                    view->data()[size - 1] != expect))) {
    return -1;
  }
  return seconds;
}

std::string WhereAmI() { return std::getenv("TROUPE_NODE_ID"); }

TROUPE_REMOTE(MakeBytes, TimeGet, WhereAmI);

std::string FlagValue(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  troupe::Init(argc, argv);
  const std::string producer = FlagValue(argc, argv, "producer", "");
  const std::string consumer = FlagValue(argc, argv, "consumer", "");
  const int iterations = std::stoi(FlagValue(argc, argv, "iterations", "5"));
  std::vector<int64_t> sizes;
  for (absl::string_view text :
       absl::StrSplit(FlagValue(argc, argv, "sizes", "1048576,104857600,1073741824"), ',')) {
    int64_t size;
    if (!absl::SimpleAtoi(text, &size)) {
      std::fprintf(stderr, "--sizes: not a number: %s\n", std::string(text).c_str());
      return 2;
    }
    sizes.push_back(size);
  }
  if (producer.empty() || consumer.empty()) {
    std::fprintf(stderr, "usage: transfer_bench --producer=ID --consumer=ID [--sizes=N,...]\n");
    return 2;
  }
  // Both nodes must be in the scheduler's view before a hard affinity can pick them.
  for (const std::string& node : {producer, consumer}) {
    if (*troupe::Get(troupe::Task(WhereAmI)
                         .SetSchedulingStrategy(troupe::NodeAffinity{node, /*soft=*/false})
                         .Remote(),
                     std::chrono::seconds(60)) != node) {
      std::fprintf(stderr, "node %s did not take a task\n", node.c_str());
      return 1;
    }
  }
  for (int64_t size : sizes) {
    std::vector<double> times;
    for (int i = 0; i < iterations; ++i) {
      const int seed = i + 1;
      auto object = troupe::Task(MakeBytes)
                        .SetSchedulingStrategy(troupe::NodeAffinity{producer, /*soft=*/false})
                        .Remote(size, seed);
      troupe::Wait(std::vector<troupe::ObjectRef<Bytes>>{object}, 1);
      const double seconds =
          *troupe::Get(troupe::Task(TimeGet)
                           .SetSchedulingStrategy(troupe::NodeAffinity{consumer, /*soft=*/false})
                           .Remote(std::vector<troupe::ObjectRef<Bytes>>{object}, size, seed));
      if (seconds < 0) {
        std::fprintf(stderr, "the consumer read a wrong object of %lld bytes\n",
                     static_cast<long long>(size));
        return 1;
      }
      times.push_back(seconds);
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    std::printf("{\"bytes\": %lld, \"seconds\": %.6f, \"gbps\": %.3f}\n",
                static_cast<long long>(size), median, size / median / 1e9);
    std::fflush(stdout);
  }
  troupe::Shutdown();
  return 0;
}
