// Troupe's side of the collective benchmark, in the style of nccl-tests: for all-reduce,
// all-gather and reduce-scatter of f32 buffers from --min-bytes to --max-bytes, prints one JSON
// object per line with the size, the time per operation, the algorithm bandwidth (bytes / time)
// and the bus bandwidth (algbw * 2(n-1)/n for all-reduce, (n-1)/n for the others: what each
// link carries, comparable across world sizes). Members are actors, joined into a CPU-backend
// group: on an embedded cluster, or on the cluster TROUPE_ADDRESS names; --spread puts one member
// on each node (a STRICT_SPREAD placement group of one-CPU bundles), so members on different
// hosts talk over TCP. bench/collective_bench.py runs this and PyTorch's gloo backend side by
// side (--netns: across network namespaces).
//   collective_bench [--ranks=N] [--ops=allreduce,allgather,reduce_scatter] [--spread]
//                    [--min-bytes=1024] [--max-bytes=256MiB] [--factor=4] [--extra-bytes=45MiB]
//                    [--seconds=0.5] [--member-env=K=V,...]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "troupe/api.h"
#include "troupe/collective.h"
#include "troupe/placement_group.h"

namespace {

namespace coll = troupe::collective;

struct Sweep {
  int64_t min_bytes, max_bytes;
  int factor;
  std::vector<int64_t> extra_bytes;  // sizes measured besides the doubling sweep (e.g. 45 MB)
  double seconds_per_size;
};

std::vector<int64_t> Sizes(const Sweep& sweep) {
  std::vector<int64_t> sizes;
  for (int64_t b = sweep.min_bytes; b <= sweep.max_bytes; b *= sweep.factor) sizes.push_back(b);
  for (int64_t b : sweep.extra_bytes) sizes.push_back(b);
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

double ProcessCpuSeconds() {
  timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return now.tv_sec + now.tv_nsec * 1e-9;
}

class Member {
 public:
  static Member* Create() { return new Member(); }

  // `env`: "K=V,K=V" set in the member's process first (tuning experiments).
  std::string Join(int world, int rank, std::string env) {
    for (const std::string& pair :
         std::vector<std::string>(absl::StrSplit(env, ',', absl::SkipEmpty()))) {
      const size_t eq = pair.find('=');
      if (eq != std::string::npos)
        setenv(pair.substr(0, eq).c_str(), pair.substr(eq + 1).c_str(), 1);
    }
    coll::InitGroup(world, rank, coll::Backend::kCpu, "bench");
    return "ok";
  }

  // Runs the sweep; rank 0 returns the JSON lines.
  std::string Run(int64_t min_bytes, int64_t max_bytes, int factor, int64_t extra, double seconds,
                  std::string ops) {
    const int rank = coll::GetRank("bench"), world = coll::GetWorldSize("bench");
    Sweep sweep{min_bytes, max_bytes, factor, {}, seconds};
    if (extra > 0) sweep.extra_bytes.push_back(extra);
    std::string out;
    for (const std::string& op_name :
         std::vector<std::string>(absl::StrSplit(ops, ',', absl::SkipEmpty()))) {
      const char* op = op_name.c_str();
      for (int64_t bytes : Sizes(sweep)) {
        // `bytes` is the size of the result, as in nccl-tests: the all-gather output and the
        // reduce-scatter input hold `bytes`; each rank's block is bytes / world.
        const size_t count = bytes / 4;
        const size_t block = count / world;
        std::vector<float> a(count, 1.0f), b(count, 0.0f);
        auto once = [&] {
          if (std::strcmp(op, "allreduce") == 0) {
            coll::AllReduce(a.data(), count, coll::DataType::kFloat32, coll::ReduceOp::kSum,
                            "bench");
          } else if (std::strcmp(op, "allgather") == 0) {
            coll::AllGather(a.data(), b.data(), block, coll::DataType::kFloat32, "bench");
          } else {
            coll::ReduceScatter(a.data(), b.data(), block, coll::DataType::kFloat32,
                                coll::ReduceOp::kSum, "bench");
          }
        };
        // Warm up, then agree (through rank 0's estimate) on an iteration count for ~seconds.
        once();
        coll::Barrier("bench");
        auto start = std::chrono::steady_clock::now();
        once();
        double estimate =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        coll::Broadcast(&estimate, 1, coll::DataType::kFloat64, 0, "bench");
        const int iterations =
            std::clamp(static_cast<int>(seconds / std::max(estimate, 1e-7)), 3, 100000);
        coll::Barrier("bench");
        const double cpu_start = ProcessCpuSeconds();
        start = std::chrono::steady_clock::now();
        for (int i = 0; i < iterations; ++i) once();
        double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        // CPU time per operation, averaged over the members: less sensitive than wall time to
        // other load on the machine (it shows what an operation costs, not how long it waited).
        double cpu = ProcessCpuSeconds() - cpu_start;
        coll::AllReduce(&cpu, 1, coll::DataType::kFloat64, coll::ReduceOp::kSum, "bench");
        // The slowest member's time is the operation's time.
        coll::AllReduce(&elapsed, 1, coll::DataType::kFloat64, coll::ReduceOp::kMax, "bench");
        const double per_op = elapsed / iterations;
        const double algbw = bytes / per_op / 1e9;
        const double factor_bus = std::strcmp(op, "allreduce") == 0 ? 2.0 * (world - 1) / world
                                                                    : 1.0 * (world - 1) / world;
        char line[320];
        std::snprintf(line, sizeof(line),
                      "{\"impl\": \"troupe\", \"op\": \"%s\", \"ranks\": %d, \"bytes\": %lld, "
                      "\"time_us\": %.2f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, "
                      "\"cpu_us_per_member\": %.2f}\n",
                      op, world, static_cast<long long>(bytes), per_op * 1e6, algbw,
                      algbw * factor_bus, cpu / world / iterations * 1e6);
        if (rank == 0) out += line;
      }
    }
    return out;
  }
};

TROUPE_REMOTE(Member::Create, &Member::Join, &Member::Run);

}  // namespace

int main(int argc, char** argv) {
  int64_t min_bytes = 1024, max_bytes = 256ll << 20, extra = 45ll << 20;
  int factor = 4;
  double seconds = 0.5;
  std::vector<int> worlds = {2, 4};
  std::string ops = "allreduce,allgather,reduce_scatter";
  std::string member_env;
  bool spread = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--min-bytes=", 12) == 0) min_bytes = std::atoll(argv[i] + 12);
    if (std::strncmp(argv[i], "--max-bytes=", 12) == 0) max_bytes = std::atoll(argv[i] + 12);
    if (std::strncmp(argv[i], "--factor=", 9) == 0) factor = std::atoi(argv[i] + 9);
    if (std::strncmp(argv[i], "--extra-bytes=", 14) == 0) extra = std::atoll(argv[i] + 14);
    if (std::strncmp(argv[i], "--seconds=", 10) == 0) seconds = std::atof(argv[i] + 10);
    if (std::strncmp(argv[i], "--ranks=", 8) == 0) worlds = {std::atoi(argv[i] + 8)};
    if (std::strncmp(argv[i], "--ops=", 6) == 0) ops = argv[i] + 6;
    if (std::strcmp(argv[i], "--spread") == 0) spread = true;
    if (std::strncmp(argv[i], "--member-env=", 13) == 0) member_env = argv[i] + 13;
  }
  troupe::Config config;
  config.num_cpus = 2;
  config.log_to_driver = false;
  troupe::Init(config);  // in worker mode (an actor's process) this runs actors and never returns
  for (int world : worlds) {
    std::vector<troupe::ActorHandle<Member>> members;
    troupe::PlacementGroup nodes;
    if (spread) {  // one member per node: the group spans hosts and uses TCP between them
      troupe::PlacementGroupOptions options{
          "collective-bench", {}, troupe::PlacementStrategy::kStrictSpread};
      options.bundles.assign(world, {{"CPU", 1}});
      nodes = troupe::CreatePlacementGroup(options);
      if (!nodes.Wait(std::chrono::seconds(60))) {
        std::fprintf(stderr, "--spread: the cluster has no %d nodes with a free CPU each\n", world);
        return 1;
      }
    }
    for (int r = 0; r < world; ++r) {
      auto creator = troupe::Actor(Member::Create);
      if (spread) creator.SetPlacementGroup(nodes, r).SetResources({{"CPU", 1}});
      members.push_back(creator.Remote());
    }
    std::vector<troupe::ObjectRef<std::string>> joined, results;
    for (int r = 0; r < world; ++r)
      joined.push_back(members[r].Task(&Member::Join).Remote(world, r, member_env));
    troupe::Get(joined);
    for (int r = 0; r < world; ++r) {
      results.push_back(
          members[r].Task(&Member::Run).Remote(min_bytes, max_bytes, factor, extra, seconds, ops));
    }
    std::fputs(troupe::Get(results[0])->c_str(), stdout);
    std::fflush(stdout);
    for (auto& member : members) member.Kill();
    if (spread) troupe::RemovePlacementGroup(nodes);
  }
  troupe::Shutdown();
  return 0;
}
