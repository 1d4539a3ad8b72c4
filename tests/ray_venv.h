// Ray's own SDK and CLI, for the tests that drive Troupe's head with them (jobs_test,
// job_logs_test): the virtualenv scripts/install_ray.sh makes (scripts/test.sh runs it), at
// $HOME/.cache/troupe-bench-venv. When it is not usable the tests skip with the reason, which
// includes why install_ray.sh's last attempt failed (it writes that to <venv>.unavailable).
// Stateless; thread-safe.
#pragma once

#include <string>

namespace troupe::testing {

// $HOME/.cache/troupe-bench-venv.
std::string RayVenv();
// The path of `tool` in the virtualenv ("bin/python", "bin/ray").
std::string RayTool(const std::string& tool);
// "" when `tool` exists in the virtualenv and, for bin/python, imports ray.job_submission and
// aiohttp; otherwise why not, saying how to install it and quoting install_ray.sh's failure.
std::string RayUnavailableReason(const std::string& tool);

}  // namespace troupe::testing
