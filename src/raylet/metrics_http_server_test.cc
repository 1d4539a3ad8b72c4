// The raylet's /metrics endpoint over real HTTP: the token is required, other paths are 404.
#include "src/raylet/metrics_http_server.h"

#include "gtest/gtest.h"
#include "httplib.h"

namespace troupe {
namespace {

TEST(MetricsHttpServerTest, ServesRenderedMetricsToTokenHoldersOnly) {
  MetricsHttpServerOptions options;
  options.token = "secret";
  auto server = MetricsHttpServer::Start(options, [] { return std::string("jobs_total 3\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_FALSE((*server)->tls());
  httplib::Client client("127.0.0.1", (*server)->port());
  auto ok = client.Get("/metrics", {{"Authorization", "Bearer secret"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->body, "jobs_total 3\n");
  EXPECT_EQ(ok->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  auto wrong = client.Get("/metrics", {{"Authorization", "Bearer guess"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_NE(wrong->body.find("Authorization: Bearer <token>"), std::string::npos) << wrong->body;
  auto none = client.Get("/metrics");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  auto other = client.Get("/other", {{"Authorization", "Bearer secret"}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
}

TEST(MetricsHttpServerTest, ATakenPortIsAClearError) {
  MetricsHttpServerOptions options;
  auto first = MetricsHttpServer::Start(options, [] { return std::string(); });
  ASSERT_TRUE(first.ok()) << first.status();
  options.port = (*first)->port();
  auto second = MetricsHttpServer::Start(options, [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("--metrics-port"), std::string::npos) << second.status();
}

}  // namespace
}  // namespace troupe
