#include "src/common/process_state.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace troupe {
namespace {

// include/linux/sched.h: set on the first step of do_exit, before files are closed.
constexpr unsigned long kPfExiting = 0x00000004;

}  // namespace

bool ProcessIsExiting(int pid) {
  if (pid <= 0) return false;
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!in || !std::getline(in, line)) return true;  // no such process (any more)
  // "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm may hold spaces and
  // parentheses, so fields are counted from the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return false;
  std::vector<std::string> fields = absl::StrSplit(line.substr(close + 2), ' ');
  if (fields.size() < 7) return false;
  const std::string& state = fields[0];
  if (state == "Z" || state == "X" || state == "x") return true;
  unsigned long flags = 0;
  if (!absl::SimpleAtoi(fields[6], &flags)) return false;
  return (flags & kPfExiting) != 0;
}

}  // namespace troupe
