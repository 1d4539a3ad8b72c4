#include "src/common/machine_stats.h"

#include <fstream>
#include <sstream>

namespace troupe {
namespace {

std::string ReadAll(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<CpuTimes> ParseProcStat(const std::string& text) {
  std::istringstream in(text);
  std::string label;
  if (!(in >> label) || label != "cpu") return std::nullopt;
  // user nice system idle iowait irq softirq steal (guest time is inside user already)
  int64_t field[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 4; ++i) {
    if (!(in >> field[i]) || field[i] < 0) return std::nullopt;
  }
  for (int i = 4; i < 8; ++i) {
    if (!(in >> field[i])) field[i] = 0;  // older kernels have fewer columns
  }
  CpuTimes times;
  times.busy = field[0] + field[1] + field[2] + field[5] + field[6] + field[7];
  times.total = times.busy + field[3] + field[4];
  return times;
}

std::optional<MemoryUse> ParseMeminfo(const std::string& text) {
  std::istringstream in(text);
  int64_t total_kb = -1, available_kb = -1;
  std::string key;
  while (in >> key) {
    int64_t kb = 0;
    if (!(in >> kb)) break;
    if (key == "MemTotal:") total_kb = kb;
    if (key == "MemAvailable:") available_kb = kb;
    in.ignore(64, '\n');
  }
  if (total_kb <= 0 || available_kb < 0 || available_kb > total_kb) return std::nullopt;
  return MemoryUse{total_kb * 1024, (total_kb - available_kb) * 1024};
}

std::optional<CpuTimes> ReadCpuTimes() { return ParseProcStat(ReadAll("/proc/stat")); }
std::optional<MemoryUse> ReadMemoryUse() { return ParseMeminfo(ReadAll("/proc/meminfo")); }

double CpuPercent(const CpuTimes& before, const CpuTimes& after) {
  const int64_t total = after.total - before.total, busy = after.busy - before.busy;
  if (total <= 0 || busy < 0) return 0;
  return busy >= total ? 100.0 : 100.0 * static_cast<double>(busy) / static_cast<double>(total);
}

}  // namespace troupe
