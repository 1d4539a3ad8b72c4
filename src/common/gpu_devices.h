// How a node's GPU indices become CUDA device lists. The raylet numbers the GPUs it sees 0..n-1
// and leases those indices (TROUPE_GPU_IDS); when the raylet itself runs under
// CUDA_VISIBLE_DEVICES, index i is the i-th entry of that list, not physical GPU i. Used by the
// raylet's worker pool (masking a worker to its lease) and by `troupe train launch` (the
// CUDA_VISIBLE_DEVICES of a launched rank). Pure functions; thread-safe.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace troupe {

// The CUDA_VISIBLE_DEVICES value that shows exactly the leased GPUs `gpu_ids` ("1,2", the
// raylet's indices) to a process started in the environment of a raylet whose own
// CUDA_VISIBLE_DEVICES is `raylet_visible` (nullptr or "": unset, so indices are physical GPUs).
// Each index is looked up in that list, e.g. ("0", "2,3") -> "2"; an index past its end is kept
// as given (CUDA then ignores it, as it would have the raylet).
std::string VisibleDevicesForLease(absl::string_view gpu_ids, const char* raylet_visible);

// Inside a worker process: the CUDA_VISIBLE_DEVICES value for a child process that should see
// exactly this worker's leased GPUs. `visibility` is the worker's TROUPE_GPU_VISIBILITY
// ("assigned": the raylet already masked this process to its lease, so `own_visible`, the
// worker's CUDA_VISIBLE_DEVICES, is that list; otherwise the worker inherited the raylet's, and
// the lease is mapped through it). "" for no lease.
std::string ChildVisibleDevices(absl::string_view gpu_ids, const char* visibility,
                                const char* own_visible);

}  // namespace troupe
