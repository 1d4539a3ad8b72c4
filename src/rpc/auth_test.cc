#include "src/rpc/auth.h"

#include <sys/stat.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace troupe {
namespace {

TEST(ClusterTokenTest, RoundTripsThroughText) {
  ClusterToken token = ClusterToken::Generate(ClusterId::FromRandom());
  auto parsed = ClusterToken::Parse(token.ToString() + "\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->Matches(token));
  EXPECT_FALSE(ClusterToken::Generate(token.cluster_id()).Matches(token));
}

TEST(ClusterTokenTest, RejectsGarbage) {
  EXPECT_FALSE(ClusterToken::Parse("").ok());
  EXPECT_FALSE(ClusterToken::Parse("hunter2").ok());
  EXPECT_FALSE(ClusterToken::Parse("troupe_0011_abcd").ok());
}

TEST(ClusterTokenTest, TokenFileIsPrivate) {
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/token";
  ClusterToken token = ClusterToken::Generate(ClusterId::FromRandom());
  ASSERT_TRUE(WriteTokenFile(path, token).ok());
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  auto read = ReadTokenFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->Matches(token));
  EXPECT_EQ(ReadTokenFile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(TokenAuthenticatorTest, SaysWhyATokenIsRefused) {
  ClusterToken mine = ClusterToken::Generate(ClusterId::FromRandom());
  TokenAuthenticator auth(mine);
  EXPECT_TRUE(auth.CheckValue("Bearer " + mine.ToString()).ok());

  // Not byte for byte the token, but the same token: still accepted (the careful path).
  EXPECT_TRUE(auth.CheckValue("Bearer " + mine.ToString() + " ").ok());

  grpc::Status no_bearer = auth.CheckValue(mine.ToString());
  EXPECT_EQ(no_bearer.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  grpc::Status wrong =
      auth.CheckValue("Bearer " + ClusterToken::Generate(mine.cluster_id()).ToString());
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(wrong.error_message().find("wrong token for cluster"), std::string::npos);

  grpc::Status other_cluster =
      auth.CheckValue("Bearer " + ClusterToken::Generate(ClusterId::FromRandom()).ToString());
  EXPECT_NE(other_cluster.error_message().find("different cluster"), std::string::npos)
      << other_cluster.error_message();
}

}  // namespace
}  // namespace troupe
