#include "src/http/request_guard.h"

#include "gtest/gtest.h"

namespace troupe::http {
namespace {

RequestFacts Facts(std::string path, std::string authorization) {
  RequestFacts facts;
  facts.path = std::move(path);
  facts.host = "127.0.0.1:8265";
  facts.authorization = std::move(authorization);
  return facts;
}

TEST(RequestGuardTest, TokenIsRequiredExceptForTheVersion) {
  EXPECT_FALSE(CheckRequest(Facts("/api/jobs/", "Bearer secret"), "secret").has_value());
  EXPECT_FALSE(CheckRequest(Facts("/api/version", ""), "secret").has_value());
  auto none = CheckRequest(Facts("/api/jobs/", ""), "secret");
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->status, 401);
  EXPECT_NE(none->body["error"].get<std::string>().find("no token"), std::string::npos);
  auto wrong = CheckRequest(Facts("/metrics", "Bearer guess"), "secret");
  ASSERT_TRUE(wrong.has_value());
  EXPECT_EQ(wrong->status, 401);
  EXPECT_NE(wrong->body["error"].get<std::string>().find("wrong token"), std::string::npos);
}

TEST(RequestGuardTest, CrossSiteRequestsAreRefusedEvenWithTheToken) {
  RequestFacts other_origin = Facts("/api/jobs/", "Bearer secret");
  other_origin.origin = "http://evil.example";
  EXPECT_EQ(CheckRequest(other_origin, "secret")->status, 403);
  RequestFacts marked = Facts("/api/version", "");
  marked.fetch_site = "cross-site";
  EXPECT_EQ(CheckRequest(marked, "secret")->status, 403);
  RequestFacts same_origin = Facts("/api/jobs/", "Bearer secret");
  same_origin.origin = "http://127.0.0.1:8265";
  same_origin.fetch_site = "same-origin";
  EXPECT_FALSE(CheckRequest(same_origin, "secret").has_value());
  // Under TLS the page's own origin is https://; http:// for the same host is another origin.
  same_origin.tls = true;
  EXPECT_EQ(CheckRequest(same_origin, "secret")->status, 403);
  same_origin.origin = "https://127.0.0.1:8265";
  EXPECT_FALSE(CheckRequest(same_origin, "secret").has_value());
}

TEST(RequestGuardTest, RouteLabelsHideIdsAndNames) {
  EXPECT_EQ(RouteLabel("GET", "/api/jobs/abc/logs/tail"), "GET /api/jobs/{id}/logs/tail");
  EXPECT_EQ(RouteLabel("GET", "/api/jobs/abc"), "GET /api/jobs/{id}");
  EXPECT_EQ(RouteLabel("POST", "/api/jobs/"), "POST /api/jobs/");
  EXPECT_EQ(RouteLabel("PUT", "/api/packages/gcs/troupe_pkg_x.pkg"), "PUT /api/packages/{name}");
  EXPECT_EQ(RouteLabel("GET", "/metrics"), "GET /metrics");
  EXPECT_EQ(RouteLabel("GET", "/api/v0/tasks/0a1b"), "GET /api/v0/tasks/{id}");
  EXPECT_EQ(RouteLabel("GET", "/api/v0/tasks/summarize"), "GET /api/v0/tasks/summarize");
  EXPECT_EQ(RouteLabel("GET", "/api/v0/tasks/"), "GET /api/v0/tasks/");
}

}  // namespace
}  // namespace troupe::http
