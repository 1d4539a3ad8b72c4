// Troupe's side of the collective benchmark, in the style of nccl-tests: for all-reduce,
// all-gather and reduce-scatter of f32 buffers from --min-bytes to --max-bytes, prints one JSON
// object per line with the size, the time per operation, the algorithm bandwidth (bytes / time)
// and the bus bandwidth (algbw * 2(n-1)/n for all-reduce, (n-1)/n for the others: what each
// link carries, comparable across world sizes). Members are actors on an embedded cluster,
// joined into a CPU-backend group. bench/collective_bench.py runs this and PyTorch's gloo backend
// side by side.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "troupe/api.h"
#include "troupe/collective.h"

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

class Member {
 public:
  static Member* Create() { return new Member(); }

  std::string Join(int world, int rank) {
    coll::InitGroup(world, rank, coll::Backend::kCpu, "bench");
    return "ok";
  }

  // Runs the sweep; rank 0 returns the JSON lines.
  std::string Run(int64_t min_bytes, int64_t max_bytes, int factor, int64_t extra, double seconds) {
    const int rank = coll::GetRank("bench"), world = coll::GetWorldSize("bench");
    Sweep sweep{min_bytes, max_bytes, factor, {}, seconds};
    if (extra > 0) sweep.extra_bytes.push_back(extra);
    std::string out;
    for (const char* op : {"allreduce", "allgather", "reduce_scatter"}) {
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
        start = std::chrono::steady_clock::now();
        for (int i = 0; i < iterations; ++i) once();
        double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        // The slowest member's time is the operation's time.
        coll::AllReduce(&elapsed, 1, coll::DataType::kFloat64, coll::ReduceOp::kMax, "bench");
        const double per_op = elapsed / iterations;
        const double algbw = bytes / per_op / 1e9;
        const double factor_bus = std::strcmp(op, "allreduce") == 0 ? 2.0 * (world - 1) / world
                                                                    : 1.0 * (world - 1) / world;
        char line[256];
        std::snprintf(line, sizeof(line),
                      "{\"impl\": \"troupe\", \"op\": \"%s\", \"ranks\": %d, \"bytes\": %lld, "
                      "\"time_us\": %.2f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f}\n",
                      op, world, static_cast<long long>(bytes), per_op * 1e6, algbw,
                      algbw * factor_bus);
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
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--min-bytes=", 12) == 0) min_bytes = std::atoll(argv[i] + 12);
    if (std::strncmp(argv[i], "--max-bytes=", 12) == 0) max_bytes = std::atoll(argv[i] + 12);
    if (std::strncmp(argv[i], "--factor=", 9) == 0) factor = std::atoi(argv[i] + 9);
    if (std::strncmp(argv[i], "--extra-bytes=", 14) == 0) extra = std::atoll(argv[i] + 14);
    if (std::strncmp(argv[i], "--seconds=", 10) == 0) seconds = std::atof(argv[i] + 10);
    if (std::strncmp(argv[i], "--ranks=", 8) == 0) worlds = {std::atoi(argv[i] + 8)};
  }
  troupe::Config config;
  config.num_cpus = 2;
  config.log_to_driver = false;
  troupe::Init(config);  // in worker mode (an actor's process) this runs actors and never returns
  for (int world : worlds) {
    std::vector<troupe::ActorHandle<Member>> members;
    for (int r = 0; r < world; ++r) members.push_back(troupe::Actor(Member::Create).Remote());
    std::vector<troupe::ObjectRef<std::string>> joined, results;
    for (int r = 0; r < world; ++r)
      joined.push_back(members[r].Task(&Member::Join).Remote(world, r));
    troupe::Get(joined);
    for (int r = 0; r < world; ++r) {
      results.push_back(
          members[r].Task(&Member::Run).Remote(min_bytes, max_bytes, factor, extra, seconds));
    }
    std::fputs(troupe::Get(results[0])->c_str(), stdout);
    std::fflush(stdout);
    for (auto& member : members) member.Kill();
  }
  troupe::Shutdown();
  return 0;
}
