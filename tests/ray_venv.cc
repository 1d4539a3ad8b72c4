#include "tests/ray_venv.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace troupe::testing {

std::string RayVenv() {
  const char* home = std::getenv("HOME");
  return absl::StrCat(home ? home : "", "/.cache/troupe-bench-venv");
}

std::string RayTool(const std::string& tool) { return absl::StrCat(RayVenv(), "/", tool); }

std::string RayUnavailableReason(const std::string& tool) {
  const std::string path = RayTool(tool);
  std::string problem;
  if (!std::filesystem::exists(path)) {
    problem = absl::StrCat("no ", path);
  } else if (tool == "bin/python" &&
             std::system((path + " -c 'import ray.job_submission, aiohttp' 2>/dev/null").c_str()) !=
                 0) {
    problem = absl::StrCat(path, " cannot import ray.job_submission and aiohttp");
  } else {
    return "";
  }
  std::ifstream failure(RayVenv() + ".unavailable");
  std::string why((std::istreambuf_iterator<char>(failure)), std::istreambuf_iterator<char>());
  return absl::StrCat(
      "Ray is not installed: ", problem,
      " (bash scripts/install_ray.sh installs it; scripts/test.sh runs it)",
      why.empty() ? "" : "; its last attempt failed: ", absl::StripTrailingAsciiWhitespace(why));
}

}  // namespace troupe::testing
