#include "src/core_worker/cluster_liveness.h"

#include <vector>

#include "gtest/gtest.h"

namespace troupe {
namespace {

// Probes whose answers the test sets; each probe advances the fake clock as a slow RPC would.
struct Fixture {
  FakeClock clock;
  absl::Status gcs = absl::OkStatus();
  absl::Status raylet = absl::OkStatus();
  std::vector<absl::Status> declared;
  ClusterLiveness liveness{{"10.0.0.1:6379", absl::Seconds(3)},
                           &clock,
                           [this] { return gcs; },
                           [this] { return raylet; },
                           [this](const absl::Status& status) { declared.push_back(status); }};
};

TEST(ClusterLivenessTest, StaysReachableWhileBothAnswer) {
  Fixture f;
  for (int i = 0; i < 100; ++i) {
    f.clock.Advance(absl::Seconds(1));
    f.liveness.Check();
  }
  EXPECT_TRUE(f.liveness.status().ok());
  EXPECT_TRUE(f.declared.empty());
}

TEST(ClusterLivenessTest, AnOutageShorterThanTheLimitIsForgiven) {
  Fixture f;
  f.gcs = absl::UnavailableError("connection refused");
  f.clock.Advance(absl::Seconds(2));
  f.liveness.Check();
  f.gcs = absl::OkStatus();  // the GCS restarted
  f.clock.Advance(absl::Milliseconds(900));
  f.liveness.Check();
  // A second short outage counts from the last good probe, not from the first failure.
  f.gcs = absl::UnavailableError("GCS at 10.0.0.1:6379: connection refused");
  f.clock.Advance(absl::Seconds(2));
  f.liveness.Check();
  EXPECT_TRUE(f.liveness.status().ok());
  EXPECT_TRUE(f.declared.empty());
}

TEST(ClusterLivenessTest, DeclaredOnceWhenTheGcsIsGonePastTheLimit) {
  Fixture f;
  f.gcs = absl::UnavailableError("GCS at 10.0.0.1:6379: connection refused");
  f.clock.Advance(absl::Seconds(2));
  f.liveness.Check();
  EXPECT_TRUE(f.liveness.status().ok());
  f.clock.Advance(absl::Seconds(1));
  f.liveness.Check();
  ASSERT_EQ(f.declared.size(), 1u);
  const absl::Status status = f.liveness.status();
  EXPECT_TRUE(IsClusterUnreachable(status));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("10.0.0.1:6379 has been unreachable for 3 s"), std::string::npos)
      << status;
  EXPECT_NE(status.message().find("(GCS at 10.0.0.1:6379: connection refused)"), std::string::npos)
      << status;
  EXPECT_NE(status.message().find("TROUPE_GCS_RECONNECT_TIMEOUT_S"), std::string::npos);
  // Coming back later does not undo it, and it is not declared twice.
  f.gcs = absl::OkStatus();
  f.clock.Advance(absl::Seconds(5));
  f.liveness.Check();
  EXPECT_EQ(f.declared.size(), 1u);
  EXPECT_TRUE(IsClusterUnreachable(f.liveness.status()));
}

TEST(ClusterLivenessTest, ALostLocalRayletAloneIsEnough) {
  Fixture f;
  f.raylet = absl::UnavailableError("raylet at 10.0.0.1:7000: socket closed");
  f.clock.Advance(absl::Seconds(4));
  f.liveness.Check();
  ASSERT_EQ(f.declared.size(), 1u);
  EXPECT_NE(f.declared[0].message().find("(raylet at 10.0.0.1:7000: socket closed)"),
            std::string::npos)
      << f.declared[0];
}

TEST(ClusterLivenessTest, OtherStatusesAreNotClusterUnreachable) {
  EXPECT_FALSE(IsClusterUnreachable(absl::UnavailableError("x")));
  EXPECT_FALSE(IsClusterUnreachable(absl::OkStatus()));
  EXPECT_TRUE(IsClusterUnreachable(ClusterUnreachableStatus("x")));
}

}  // namespace
}  // namespace troupe
