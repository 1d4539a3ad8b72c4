#include "src/common/process_state.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(ProcessStateTest, RunningProcessIsNotExiting) {
  EXPECT_FALSE(ProcessIsExiting(getpid()));
  EXPECT_FALSE(ProcessIsExiting(getppid()));
}

TEST(ProcessStateTest, NothingToAskAbout) { EXPECT_FALSE(ProcessIsExiting(0)); }

TEST(ProcessStateTest, ZombieAndReapedProcessesAreGone) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  EXPECT_FALSE(ProcessIsExiting(child));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  // Not reaped yet: a zombie (or still tearing down), both "exiting".
  siginfo_t info;
  ASSERT_EQ(waitid(P_PID, child, &info, WEXITED | WNOWAIT), 0);
  EXPECT_TRUE(ProcessIsExiting(child));
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(ProcessIsExiting(child));
}

}  // namespace
}  // namespace troupe
