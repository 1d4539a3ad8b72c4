// The machine's CPU and memory use as a node reports them (ResourceUsage: cpu_percent,
// memory_used_bytes, memory_total_bytes), read from /proc. The CPU figure is the busy share of
// all CPUs between two readings; memory "used" is MemTotal - MemAvailable, as `free` counts it.
// Stateless functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace troupe {

struct CpuTimes {
  int64_t busy = 0;   // jiffies in user, nice, system, irq, softirq, steal
  int64_t total = 0;  // busy + idle + iowait
};

struct MemoryUse {
  int64_t total_bytes = 0;
  int64_t used_bytes = 0;
};

// The first ("cpu") line of /proc/stat's text; nullopt if it is not there or malformed.
std::optional<CpuTimes> ParseProcStat(const std::string& text);
// /proc/meminfo's text; nullopt without MemTotal or MemAvailable.
std::optional<MemoryUse> ParseMeminfo(const std::string& text);

// Read from /proc now (nullopt where it cannot be read).
std::optional<CpuTimes> ReadCpuTimes();
std::optional<MemoryUse> ReadMemoryUse();

// The busy share of the CPUs between `before` and `after`, 0-100 (0 when no time passed).
double CpuPercent(const CpuTimes& before, const CpuTimes& after);

}  // namespace troupe
