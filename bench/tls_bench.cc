// The Troupe side of bench/tls_bench.py: a driver against a running cluster (TROUPE_ADDRESS) of
// a head and one worker node offering the custom resource "remote". Measures the paths TLS sits
// on: small tasks, small actor calls, and objects pulled from the driver's node by a task on the
// other node (node-to-node transfer through the raylets). Prints one JSON object per line.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "troupe/api.h"

namespace {

int SmallValue() { return 0; }

int64_t SizeOf(std::vector<uint8_t> bytes) { return static_cast<int64_t>(bytes.size()); }

class Echo {
 public:
  static Echo* Create() { return new Echo(); }
  int Small() { return 0; }
};

TROUPE_REMOTE(SmallValue, SizeOf, Echo::Create, &Echo::Small);

using troupe::bench::Rate;
using troupe::bench::Report;

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3.0;
  int64_t transfer_mb = 100;
  std::string only;  // --only=METRIC runs just that loop (for profiling one path)
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--seconds=", 10) == 0) seconds = std::atof(argv[i] + 10);
    if (std::strncmp(argv[i], "--transfer-mb=", 14) == 0) transfer_mb = std::atoll(argv[i] + 14);
    if (std::strncmp(argv[i], "--only=", 7) == 0) only = argv[i] + 7;
  }
  auto wanted = [&](const std::string& metric) { return only.empty() || only == metric; };
  troupe::Config config;
  config.log_to_driver = false;
  troupe::Init(config);

  if (wanted("tasks_async")) Report("tasks_async",
         Rate(1000, seconds,
              [] {
                std::vector<troupe::ObjectRef<int>> refs;
                for (int i = 0; i < 1000; ++i) refs.push_back(troupe::Task(SmallValue).Remote());
                troupe::Get(refs);
              }),
         "per_second");
  if (wanted("tasks_sync")) Report("tasks_sync",
         Rate(200, seconds,
              [] {
                for (int i = 0; i < 200; ++i) troupe::Get(troupe::Task(SmallValue).Remote());
              }),
         "per_second");
  auto echo = troupe::Actor(Echo::Create).Remote();
  troupe::Get(echo.Task(&Echo::Small).Remote());
  if (wanted("actor_calls_async")) Report("actor_calls_async",
         Rate(1000, seconds,
              [&] {
                std::vector<troupe::ObjectRef<int>> refs;
                for (int i = 0; i < 1000; ++i) refs.push_back(echo.Task(&Echo::Small).Remote());
                troupe::Get(refs);
              }),
         "per_second");
  if (wanted("actor_calls_sync")) Report("actor_calls_sync",
         Rate(200, seconds,
              [&] {
                for (int i = 0; i < 200; ++i) troupe::Get(echo.Task(&Echo::Small).Remote());
              }),
         "per_second");
  // A fresh object each round (a pulled copy would be reused), pulled by the other node.
  if (!wanted("node_to_node_transfer")) {
    troupe::Shutdown();
    return 0;
  }
  const int64_t bytes = transfer_mb << 20;
  std::vector<uint8_t> payload(bytes, 7);
  const double transfers = Rate(1, seconds, [&] {
    payload[0]++;
    auto ref = troupe::Put(payload);
    troupe::Get(troupe::Task(SizeOf).SetResources({{"remote", 1}}).Remote(ref));
  });
  Report("node_to_node_transfer", transfers * bytes / 1e9, "GB_per_second");
  troupe::Shutdown();
  return 0;
}
