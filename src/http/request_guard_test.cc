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

TEST(RequestGuardTest, TheDashboardPageAndLoginNeedNoToken) {
  EXPECT_FALSE(CheckRequest(Facts("/", ""), "secret").has_value());
  EXPECT_FALSE(CheckRequest(Facts("/dashboard/login", ""), "secret").has_value());
  EXPECT_FALSE(CheckRequest(Facts("/dashboard/app.js", ""), "secret").has_value());
  EXPECT_EQ(CheckRequest(Facts("/dashboardx", ""), "secret")->status, 401);
  // ...but a login posted from another site is refused like any cross-site request.
  RequestFacts forged_login = Facts("/dashboard/login", "");
  forged_login.origin = "http://evil.example";
  EXPECT_EQ(CheckRequest(forged_login, "secret")->status, 403);
}

TEST(RequestGuardTest, ASessionCookieCountsOnlyOnSameOriginRequests) {
  RequestFacts from_page = Facts("/api/jobs/", "");
  from_page.session = true;
  from_page.origin = "http://127.0.0.1:8265";
  from_page.fetch_site = "same-origin";
  EXPECT_FALSE(CheckRequest(from_page, "secret").has_value());

  // Under TLS the page's Origin is https://.
  RequestFacts over_tls = from_page;
  over_tls.tls = true;
  over_tls.origin = "https://127.0.0.1:8265";
  EXPECT_FALSE(CheckRequest(over_tls, "secret").has_value());

  // A page on another site: refused whatever it carries.
  RequestFacts cross_site = from_page;
  cross_site.origin = "http://evil.example";
  cross_site.fetch_site = "cross-site";
  EXPECT_EQ(CheckRequest(cross_site, "secret")->status, 403);
  cross_site.origin = "";  // e.g. an <img> or a form GET: no Origin, still marked cross-site
  EXPECT_EQ(CheckRequest(cross_site, "secret")->status, 403);

  // Another port of the same host is "same-site": SameSite=Strict sends the cookie, so the
  // cookie must not count there, Origin or not.
  RequestFacts same_site = Facts("/api/jobs/", "");
  same_site.session = true;
  same_site.fetch_site = "same-site";
  auto refused = CheckRequest(same_site, "secret");
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 401);
  EXPECT_NE(refused->body["error"].get<std::string>().find("same-origin"), std::string::npos);
  same_site.origin = "http://127.0.0.1:8000";
  EXPECT_EQ(CheckRequest(same_site, "secret")->status, 403);

  // No Sec-Fetch-Site at all (not a current browser's fetch): the cookie does not count.
  RequestFacts unmarked = Facts("/api/jobs/", "");
  unmarked.session = true;
  EXPECT_EQ(CheckRequest(unmarked, "secret")->status, 401);
  // A top-level navigation typed by the user ("none") is not the page's fetch either.
  unmarked.fetch_site = "none";
  EXPECT_EQ(CheckRequest(unmarked, "secret")->status, 401);

  // The page's WebSocket upgrade (its job log tail): Chromium sends no Sec-Fetch-Site there,
  // but always this server's Origin. That counts; the same upgrade from another port does not.
  RequestFacts upgrade = Facts("/api/jobs/abc/logs/tail", "");
  upgrade.session = true;
  upgrade.origin = "http://127.0.0.1:8265";
  EXPECT_FALSE(CheckRequest(upgrade, "secret").has_value());
  upgrade.origin = "http://127.0.0.1:8000";
  EXPECT_EQ(CheckRequest(upgrade, "secret")->status, 403);
  upgrade.origin = "";
  EXPECT_EQ(CheckRequest(upgrade, "secret")->status, 401);

  // Without a live session (forged, expired: Dashboard::HasSession said no), same-origin is not
  // enough.
  RequestFacts no_session = from_page;
  no_session.session = false;
  EXPECT_EQ(CheckRequest(no_session, "secret")->status, 401);
}

TEST(RequestGuardTest, CredentialsAreTheWholeTokenOrASameOriginSession) {
  EXPECT_TRUE(HasCredentials(Facts("/api/version", "Bearer secret"), "secret"));
  EXPECT_FALSE(HasCredentials(Facts("/api/version", ""), "secret"));
  EXPECT_FALSE(HasCredentials(Facts("/", "Bearer secre"), "secret"));
  EXPECT_FALSE(HasCredentials(Facts("/", "Bearer secrets"), "secret"));
  EXPECT_FALSE(HasCredentials(Facts("/", "bearer secret"), "secret"));
  RequestFacts page = Facts("/api/jobs/", "");
  page.session = true;
  page.fetch_site = "same-origin";
  EXPECT_TRUE(HasCredentials(page, "secret"));
  page.fetch_site = "same-site";
  EXPECT_FALSE(HasCredentials(page, "secret"));
}

}  // namespace
}  // namespace troupe::http
