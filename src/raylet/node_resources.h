// What a node offers when the user does not say: CPUs, GPUs seen by the CUDA runtime, memory and
// object store size. GPU detection loads libcudart at run time (dlopen), so the raylet needs no
// CUDA at build time and treats "no driver" or "no device" as zero GPUs. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

int DetectNumCpus();
// Devices the CUDA runtime reports (honours CUDA_VISIBLE_DEVICES); 0 when CUDA is absent or
// unusable, with the reason in *why_none when that is non-null.
int DetectNumGpus(std::string* why_none = nullptr);
// Whether any of `paths` exists: DetectNumGpus loads libcudart (0.45 MiB of code that stays
// mapped) only when a GPU driver's node exists (/proc/driver/nvidia, /dev/nvidiactl, or WSL's
// /dev/dxg); without one the CUDA runtime could only report "insufficient driver".
bool AnyPathExists(const std::vector<std::string>& paths);
int64_t DetectPhysicalMemoryBytes();
// Default object store size: 30% of memory, no more than /dev/shm can hold.
int64_t DefaultObjectStoreBytes();
// Default schedulable memory: 70% of memory.
int64_t DefaultMemoryBytes();

}  // namespace troupe
