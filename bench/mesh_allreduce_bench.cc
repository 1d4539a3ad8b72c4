// One member of a CPU-backend all-reduce measured without a cluster: the Mesh and CpuBackend
// directly, meeting through a file-backed KV in a directory every member sees. For profiling the
// transfer loop (perf on one process, CPU per thread): bench/mesh_allreduce_bench.sh starts one
// member per network namespace, so members talk TCP as on separate hosts.
//   mesh_allreduce_bench --rank=R --ranks=N --kv-dir=DIR --ip=ADDR [--bytes=47185920]
//                        [--iters=20] [--warmup=3] [--tcp-send-buffer=B] [--tcp-receive-buffer=B]
// Prints one JSON line per member: time per op, bus bandwidth, CPU per op (process clock).
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "src/collective/cpu_backend.h"
#include "src/collective/file_kv_testing.h"

namespace {

namespace coll = troupe::collective;

double CpuSeconds() {
  timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return now.tv_sec + now.tv_nsec * 1e-9;
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = std::stoi(Flag(argc, argv, "rank", "0"));
  const int world = std::stoi(Flag(argc, argv, "ranks", "2"));
  const size_t bytes = std::stoull(Flag(argc, argv, "bytes", std::to_string(45 << 20)));
  const int iters = std::stoi(Flag(argc, argv, "iters", "20"));
  const int warmup = std::stoi(Flag(argc, argv, "warmup", "3"));
  coll::MeshOptions options;
  options.group = "bench";
  options.world_size = world;
  options.rank = rank;
  options.key_prefix = "collective/bench/";
  options.listen_ip = Flag(argc, argv, "ip", "127.0.0.1");
  options.force_tcp = true;
  options.rendezvous_timeout = absl::Seconds(60);
  options.tcp_send_buffer =
      std::stoi(Flag(argc, argv, "tcp-send-buffer", std::to_string(options.tcp_send_buffer)));
  options.tcp_receive_buffer = std::stoi(
      Flag(argc, argv, "tcp-receive-buffer", std::to_string(options.tcp_receive_buffer)));
  auto mesh = coll::Mesh::Connect(options, coll::FileKv(Flag(argc, argv, "kv-dir", "/tmp")));
  if (!mesh.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, mesh.status().ToString().c_str());
    return 1;
  }
  coll::CpuBackend backend(std::move(*mesh));
  const size_t count = bytes / 4;
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank + i % 5);
  uint32_t seq = 0;
  double start = 0, cpu_start = 0;
  for (int i = 0; i < warmup + iters; ++i) {
    if (i == warmup) start = absl::ToUnixMicros(absl::Now()) * 1e-6, cpu_start = CpuSeconds();
    coll::OpContext ctx{coll::OpCode::kAllReduce, seq++, absl::Now() + absl::Seconds(60),
                        absl::Seconds(60)};
    if (auto status = backend.AllReduce(data.data(), count, troupe::collective::DataType::kFloat32,
                                        troupe::collective::ReduceOp::kSum, ctx);
        !status.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
      return 1;
    }
  }
  const double seconds = (absl::ToUnixMicros(absl::Now()) * 1e-6 - start) / iters;
  const double cpu = (CpuSeconds() - cpu_start) / iters;
  // A member that leaves while others still finish the last operation fails them (its closed
  // connection is taken for a death even when all its data is there): a barrier, then a pause.
  coll::OpContext ctx{coll::OpCode::kBarrier, seq++, absl::Now() + absl::Seconds(60),
                      absl::Seconds(60)};
  if (auto status = backend.Barrier(ctx); !status.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
    return 1;
  }
  absl::SleepFor(absl::Seconds(1));
  std::printf("{\"rank\": %d, \"ranks\": %d, \"bytes\": %zu, \"time_us\": %.1f, "
              "\"busbw_gbps\": %.3f, \"cpu_us\": %.1f}\n",
              rank, world, bytes, seconds * 1e6, bytes * 2.0 * (world - 1) / world / seconds / 1e9,
              cpu * 1e6);
  return 0;
}
