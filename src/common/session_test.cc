#include "src/common/session.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "gtest/gtest.h"
#include "src/common/cluster_target.h"

namespace troupe {
namespace {

std::string FreshRoot(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

TEST(SessionTest, CreateWriteReadAndLatest) {
  std::string root = FreshRoot("create");
  auto session = Session::Create(root);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE(session->WriteFile("address", "127.0.0.1:7000").ok());
  EXPECT_EQ(*session->ReadFile("address"), "127.0.0.1:7000");
  EXPECT_EQ(session->ReadFile("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(Session::Latest(root).ok());
  ASSERT_TRUE(session->MarkLatest().ok());
  EXPECT_EQ(Session::Latest(root)->dir(), session->dir());
  EXPECT_EQ(Session::All(root).size(), 1u);
}

TEST(SessionTest, LiveDaemonsIgnoresDeadAndForeignPids) {
  auto session = Session::Create(FreshRoot("daemons"));
  ASSERT_TRUE(session.ok());
  // Our own process does not carry the session dir on its command line: not a daemon of it.
  ASSERT_TRUE(session->RecordDaemon("raylet", getpid()).ok());
  ASSERT_TRUE(session->RecordDaemon("gcs", 999999999).ok());
  EXPECT_TRUE(session->LiveDaemons().empty());
  EXPECT_TRUE(ProcessMatches(getpid(), "session_test"));
}

TEST(ClusterTargetTest, FindsAddressAndTokenFromTheLatestSession) {
  std::string root = FreshRoot("target");
  unsetenv("TROUPE_ADDRESS");
  unsetenv("TROUPE_TOKEN");
  auto none = ResolveClusterTarget("", "", root);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("troupe start --head"), std::string::npos);

  auto session = Session::Create(root);
  ASSERT_TRUE(session->WriteFile("address", "127.0.0.1:7001").ok());
  ASSERT_TRUE(session->MarkLatest().ok());
  // No live daemon: a session left by a stopped cluster is named and refused.
  auto stale = ResolveClusterTarget("", "", root);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("has no live process"), std::string::npos)
      << stale.status();
  // A "daemon" of this session: a process whose command line names the session directory.
  const pid_t daemon = fork();
  if (daemon == 0) {
    execl("/bin/sh", "sh", "-c", "sleep 60", session->dir().c_str(), nullptr);
    _exit(127);
  }
  ASSERT_GT(daemon, 0);
  ASSERT_TRUE(session->RecordDaemon("raylet", daemon).ok());
  for (int i = 0; i < 200 && session->LiveDaemons().empty(); ++i) usleep(10000);  // exec'ing
  ASSERT_EQ(session->LiveDaemons().size(), 1u);
  auto no_token = ResolveClusterTarget("", "", root);
  EXPECT_EQ(no_token.status().code(), absl::StatusCode::kUnauthenticated);

  ASSERT_TRUE(session->WriteFile("token", "secret").ok());
  auto target = ResolveClusterTarget("", "", root);
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->address, "127.0.0.1:7001");
  EXPECT_EQ(target->token, "secret");
  // An explicit address without a port gets the default; an explicit token wins.
  auto explicit_target = ResolveClusterTarget("10.1.2.3", "given", root);
  EXPECT_EQ(explicit_target->address, "10.1.2.3:6380");
  EXPECT_EQ(explicit_target->token, "given");
  // A token no header can carry is refused with the reason, not sent (gRPC aborts on it).
  for (const std::string bad : {"two\ntokens", "with space", "tab\t", "caf\xc3\xa9"}) {
    auto refused = ResolveClusterTarget("10.1.2.3", bad, root);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_NE(refused.status().message().find("holds a character no token has"),
              std::string::npos)
        << refused.status();
  }
  kill(daemon, SIGKILL);
  waitpid(daemon, nullptr, 0);
}

}  // namespace
}  // namespace troupe
