// The web dashboard in a real browser (headless Chromium driven by Selenium,
// tests/dashboard_browser.py) against a real 3-node cluster: login (a wrong token refused, the
// session cookie HttpOnly and useless from another origin), 3 nodes on the overview, a job's log
// lines appearing live and its stop button, a killed actor's death cause, a FashionMNIST training
// run's accuracy chart, placement groups, task charts and node log files. Screenshots of every
// page go to $DASHBOARD_SCREENSHOTS (default: the test's undeclared outputs). Skips, saying why,
// without /usr/bin/chromium, /usr/bin/chromedriver or python3-selenium (scripts/install_deps.sh).
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "tests/test_cluster.h"

namespace {

using troupe::testing::CommandResult;
using troupe::testing::PickFreePort;
using troupe::testing::RunCommand;
using troupe::testing::TestCluster;

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/", path);
}

// Why the browser test cannot run here, or "" if it can.
std::string MissingBrowser() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromedriver", "/usr/bin/python3"}) {
    if (access(path, X_OK) != 0) {
      return absl::StrCat(path, " is missing (scripts/install_deps.sh installs chromium, ",
                          "chromium-driver and python3-selenium)");
    }
  }
  if (RunCommand({"/usr/bin/python3", "-c", "import selenium"}).exit_code != 0) {
    return "python3-selenium is missing (scripts/install_deps.sh installs it)";
  }
  return "";
}

TEST(DashboardTest, EveryPageWorksInHeadlessChromium) {
  if (std::string missing = MissingBrowser(); !missing.empty()) GTEST_SKIP() << missing;
  ASSERT_OK_AND_ASSIGN(
      TestCluster cluster,
      TestCluster::Start({"--num-cpus=2", absl::StrCat("--http-port=", PickFreePort())}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2", R"(--labels={"zone": "b"})"}));

  const char* env_dir = std::getenv("DASHBOARD_SCREENSHOTS");
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const std::string screenshots =
      env_dir != nullptr ? env_dir : (outputs != nullptr ? outputs : std::getenv("TEST_TMPDIR"));
  CommandResult browser = RunCommand(
      {"/usr/bin/python3", Runfile("tests/dashboard_browser.py"), "--url=" + cluster.HttpAddress(),
       "--token=" + cluster.token(), "--screenshots=" + screenshots,
       "--actor-program=" + Runfile("tests/dashboard_program"),
       "--train-program=" + Runfile("examples/mlp_fashion_mnist/mlp_fashion_mnist"),
       "--storage=" + std::string(std::getenv("TEST_TMPDIR")) + "/train_results"},
      {"PYTHONDONTWRITEBYTECODE=1"});
  EXPECT_EQ(browser.exit_code, 0) << "stdout:\n" << browser.out << "\nstderr:\n" << browser.err;
  std::cout << browser.out;
}

}  // namespace
