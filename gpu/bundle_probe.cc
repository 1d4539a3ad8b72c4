// What the GPU bundle's checks ask of a running cluster (scripts/gpu_check.sh, and
// gpu/bundle_test.sh in a bare Debian root):
//   bundle_probe basics                    a task, a nested task and an actor; prints "basics ok"
//   bundle_probe gpus N FRACTION           N actors of FRACTION GPU each; one JSON line per actor:
//                                          {"actor":i,"pid":..,"gpu_ids":"..","cuda_visible_devices":"..",
//                                           "devices":n,"bus_ids":["0000:..",..]}
// It attaches to the cluster at $TROUPE_ADDRESS (or starts an embedded one). CUDA is reached
// through dlopen, so the probe also runs where no CUDA library exists (it then reports
// "devices":0 and the reason).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "troupe/api.h"

namespace {

int Square(int x) { return x * x; }

int SumOfSquares(int n) {
  std::vector<troupe::ObjectRef<int>> parts;
  for (int i = 1; i <= n; ++i) parts.push_back(troupe::Task(Square).Remote(i));
  int sum = 0;
  for (const auto& value : troupe::Get(parts)) sum += *value;
  return sum;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// The CUDA devices this process sees, as PCI bus ids, or the reason it sees none.
struct Devices {
  std::vector<std::string> bus_ids;
  std::string why_none;
};

Devices SeenDevices() {
  Devices seen;
  void* lib = nullptr;
  for (const char* name : {"libcudart.so.13", "libcudart.so"}) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
  }
  if (lib == nullptr) {
    seen.why_none = "no libcudart";
    return seen;
  }
  using Count = int (*)(int*);
  using BusId = int (*)(char*, int, int);
  auto count_fn = reinterpret_cast<Count>(dlsym(lib, "cudaGetDeviceCount"));
  auto bus_fn = reinterpret_cast<BusId>(dlsym(lib, "cudaDeviceGetPCIBusId"));
  int count = 0;
  if (count_fn == nullptr || bus_fn == nullptr || count_fn(&count) != 0) {
    seen.why_none = "cudaGetDeviceCount failed";
    return seen;
  }
  for (int i = 0; i < count; ++i) {
    char bus[64] = {0};
    seen.bus_ids.push_back(bus_fn(bus, sizeof(bus), i) == 0 ? bus : "?");
  }
  return seen;
}

class GpuProbe {
 public:
  static GpuProbe* Create() { return new GpuProbe(); }
  std::string Describe(int index) {
    Devices seen = SeenDevices();
    std::string line = "{\"actor\":" + std::to_string(index) +
                       ",\"pid\":" + std::to_string(getpid()) + ",\"gpu_ids\":\"" +
                       Env("TROUPE_GPU_IDS") + "\",\"cuda_visible_devices\":\"" +
                       Env("CUDA_VISIBLE_DEVICES") + "\",\"devices\":" +
                       std::to_string(seen.bus_ids.size()) + ",\"bus_ids\":[";
    for (size_t i = 0; i < seen.bus_ids.size(); ++i) {
      line += (i ? ",\"" : "\"") + seen.bus_ids[i] + "\"";
    }
    line += "],\"why_none\":\"" + seen.why_none + "\"}";
    return line;
  }
};

class Counter {
 public:
  static Counter* Create(int start) { return new Counter(start); }
  explicit Counter(int start) : value_(start) {}
  int Add(int n) { return value_ += n; }

 private:
  int value_;
};

}  // namespace

TROUPE_REMOTE(Square, SumOfSquares, GpuProbe::Create, &GpuProbe::Describe, Counter::Create,
              &Counter::Add);

int main(int argc, char** argv) {
  troupe::Init(argc, argv);  // code above this line also runs in every worker
  const std::string mode = argc > 1 ? argv[1] : "basics";
  int status = 0;
  if (mode == "basics") {
    const int sum = *troupe::Get(troupe::Task(SumOfSquares).Remote(10));
    auto counter = troupe::Actor(Counter::Create).Remote(40);
    counter.Task(&Counter::Add).Remote(1);
    const int total = *troupe::Get(counter.Task(&Counter::Add).Remote(1));
    std::cout << "sum of squares 1..10 = " << sum << ", counter = " << total << std::endl;
    if (sum == 385 && total == 42) {
      std::cout << "basics ok" << std::endl;
    } else {
      std::cout << "basics WRONG" << std::endl;
      status = 1;
    }
  } else if (mode == "gpus" && argc == 4) {
    const int n = std::atoi(argv[2]);
    const double fraction = std::atof(argv[3]);
    std::vector<troupe::ActorHandle<GpuProbe>> actors;
    std::vector<troupe::ObjectRef<std::string>> lines;
    for (int i = 0; i < n; ++i) {
      actors.push_back(
          troupe::Actor(GpuProbe::Create).SetResources({{"GPU", fraction}}).Remote());
      lines.push_back(actors.back().Task(&GpuProbe::Describe).Remote(i));
    }
    for (auto& line : lines) std::cout << *troupe::Get(line) << std::endl;
  } else {
    std::cerr << "usage: bundle_probe basics | bundle_probe gpus N FRACTION" << std::endl;
    status = 2;
  }
  troupe::Shutdown();
  return status;
}
