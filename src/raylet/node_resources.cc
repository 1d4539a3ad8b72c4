#include "src/raylet/node_resources.h"

#include <dlfcn.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace troupe {

int DetectNumCpus() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

bool AnyPathExists(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (access(path.c_str(), F_OK) == 0) return true;
  }
  return false;
}

int DetectNumGpus(std::string* why_none) {
  if (!AnyPathExists({"/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg"})) {
    if (why_none) *why_none = "no GPU driver (no /proc/driver/nvidia, /dev/nvidiactl or /dev/dxg)";
    return 0;
  }
  const char* candidates[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                              "libcudart.so.11.0", "/usr/local/cuda/lib64/libcudart.so"};
  void* lib = nullptr;
  for (const char* name : candidates) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) {
    if (why_none) *why_none = "the CUDA runtime (libcudart) is not installed";
    return 0;
  }
  using GetDeviceCount = int (*)(int*);
  using GetErrorString = const char* (*)(int);
  auto get_count = reinterpret_cast<GetDeviceCount>(dlsym(lib, "cudaGetDeviceCount"));
  auto get_error = reinterpret_cast<GetErrorString>(dlsym(lib, "cudaGetErrorString"));
  int count = 0;
  int error = get_count ? get_count(&count) : -1;
  if (error != 0) {
    if (why_none) {
      *why_none = get_error && error > 0 ? get_error(error) : "cudaGetDeviceCount is missing";
    }
    count = 0;
  }
  // libcudart is left loaded: unloading it can crash its own exit handlers.
  return count;
}

int64_t DetectPhysicalMemoryBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
}

int64_t DefaultObjectStoreBytes() {
  int64_t bytes = DetectPhysicalMemoryBytes() * 3 / 10;
  struct statvfs shm;
  if (statvfs("/dev/shm", &shm) == 0) {
    bytes = std::min(bytes, static_cast<int64_t>(shm.f_bavail * shm.f_frsize));
  }
  return bytes;
}

int64_t DefaultMemoryBytes() { return DetectPhysicalMemoryBytes() * 7 / 10; }

}  // namespace troupe
