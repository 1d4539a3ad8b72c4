// Troupe's side of the cross-node transfer benchmark (bench/transfer_bench.py runs it against a
// two-node cluster whose nodes sit in two network namespaces, with Ray doing the same). For each
// request line "BYTES SEED" on stdin: a task on the producer node makes an object of BYTES bytes
// there; a task on the consumer node is handed a reference to it (inside a vector, so the task
// starts before the object moves) and times GetView of it there: the node-to-node transfer into
// the consumer's store plus mapping it. Answers each line with one JSON line:
//   {"bytes": N, "seconds": S}
// and exits at the end of stdin. Prints {"ready": true} once both nodes took a task.
// Usage (TROUPE_ADDRESS/TROUPE_TOKEN set):
//   transfer_bench --producer=<node id hex> --consumer=<node id hex>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
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

using troupe::bench::FlagValue;

}  // namespace

int main(int argc, char** argv) {
  troupe::Init(argc, argv);
  const std::string producer = FlagValue(argc, argv, "producer", "");
  const std::string consumer = FlagValue(argc, argv, "consumer", "");
  if (producer.empty() || consumer.empty()) {
    std::fprintf(stderr, "usage: transfer_bench --producer=ID --consumer=ID < requests\n");
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
  std::printf("{\"ready\": true}\n");
  std::fflush(stdout);
  long long size = 0;
  int seed = 0;
  while (std::scanf("%lld %d", &size, &seed) == 2) {
    auto object = troupe::Task(MakeBytes)
                      .SetSchedulingStrategy(troupe::NodeAffinity{producer, /*soft=*/false})
                      .Remote(static_cast<int64_t>(size), seed);
    troupe::Wait(std::vector<troupe::ObjectRef<Bytes>>{object}, 1);
    const double seconds =
        *troupe::Get(troupe::Task(TimeGet)
                         .SetSchedulingStrategy(troupe::NodeAffinity{consumer, /*soft=*/false})
                         .Remote(std::vector<troupe::ObjectRef<Bytes>>{object},
                                 static_cast<int64_t>(size), seed));
    if (seconds < 0) {
      std::fprintf(stderr, "the consumer read a wrong object of %lld bytes\n", size);
      return 1;
    }
    std::printf("{\"bytes\": %lld, \"seconds\": %.6f}\n", size, seconds);
    std::fflush(stdout);
  }
  troupe::Shutdown();
  return 0;
}
