#include "src/http/dashboard.h"

#include <set>

#include "gtest/gtest.h"

namespace troupe::http {
namespace {

// A clock the test moves by hand.
struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  SessionStore::Clock Get() {
    return [this] { return now; };
  }
};

std::string HeaderOf(const DashboardReply& reply, const std::string& name) {
  for (const auto& [key, value] : reply.headers) {
    if (key == name) return value;
  }
  return "";
}

// "troupe_session=<id>" from a Set-Cookie value, as a browser would send it back.
std::string CookieFrom(const DashboardReply& reply) {
  const std::string set_cookie = HeaderOf(reply, "Set-Cookie");
  return set_cookie.substr(0, set_cookie.find(';'));
}

class DashboardTest : public ::testing::Test {
 protected:
  DashboardOptions Options(bool tls = false) {
    DashboardOptions options;
    options.token = "cluster-secret";
    options.tls = tls;
    options.session_lifetime = absl::Hours(1);
    options.max_sessions = 3;
    options.clock = clock_.Get();
    return options;
  }
  FakeClock clock_;
};

TEST(CookieValueTest, FindsTheNamedCookieOnly) {
  EXPECT_EQ(CookieValue("a=1; troupe_session=abc; b=2", "troupe_session"), "abc");
  EXPECT_EQ(CookieValue("troupe_session=abc", "troupe_session"), "abc");
  EXPECT_EQ(CookieValue("xtroupe_session=abc; troupe_sessionx=d", "troupe_session"), "");
  EXPECT_EQ(CookieValue("", "troupe_session"), "");
}

TEST(SessionStoreTest, IdsAreRandomAndExpire) {
  FakeClock clock;
  SessionStore store(absl::Minutes(10), 100, clock.Get());
  std::set<std::string> ids;
  for (int i = 0; i < 20; ++i) ids.insert(store.Create());
  EXPECT_EQ(ids.size(), 20u);
  const std::string id = *ids.begin();
  EXPECT_EQ(id.size(), 64u);  // 32 random bytes, hex
  EXPECT_TRUE(store.Valid(id));
  EXPECT_FALSE(store.Valid(""));
  EXPECT_FALSE(store.Valid(std::string(64, '0')));  // forged
  clock.now += absl::Minutes(9);
  EXPECT_TRUE(store.Valid(id));
  clock.now += absl::Minutes(1);
  EXPECT_FALSE(store.Valid(id));
  EXPECT_EQ(store.size(), 0u);
}

TEST(SessionStoreTest, RemoveEndsASessionAndTheOldestGoFirstPastTheCap) {
  FakeClock clock;
  SessionStore store(absl::Hours(1), 2, clock.Get());
  const std::string first = store.Create();
  clock.now += absl::Seconds(1);
  const std::string second = store.Create();
  clock.now += absl::Seconds(1);
  const std::string third = store.Create();
  EXPECT_FALSE(store.Valid(first));
  EXPECT_TRUE(store.Valid(second));
  EXPECT_TRUE(store.Valid(third));
  store.Remove(second);
  EXPECT_FALSE(store.Valid(second));
  EXPECT_TRUE(store.Valid(third));
}

TEST_F(DashboardTest, LoginWithTheTokenSetsAStrictHttpOnlyCookie) {
  Dashboard dashboard(Options());
  DashboardReply reply =
      dashboard.Handle("POST", "/dashboard/login", "", R"({"token": "cluster-secret"})");
  EXPECT_EQ(reply.status, 200);
  const std::string set_cookie = HeaderOf(reply, "Set-Cookie");
  EXPECT_EQ(set_cookie.rfind("troupe_session=", 0), 0u) << set_cookie;
  EXPECT_NE(set_cookie.find("; HttpOnly"), std::string::npos);
  EXPECT_NE(set_cookie.find("; SameSite=Strict"), std::string::npos);
  EXPECT_NE(set_cookie.find("; Path=/"), std::string::npos);
  EXPECT_EQ(set_cookie.find("Secure"), std::string::npos);  // plain HTTP
  const std::string cookie = CookieFrom(reply);
  EXPECT_TRUE(dashboard.HasSession("theme=dark; " + cookie));
  EXPECT_EQ(dashboard.Handle("GET", "/dashboard/session", cookie, "").body,
            R"({"logged_in":true})");

  Dashboard https(Options(/*tls=*/true));
  reply = https.Handle("POST", "/dashboard/login", "", R"({"token": "cluster-secret"})");
  EXPECT_NE(HeaderOf(reply, "Set-Cookie").find("; Secure"), std::string::npos);
}

TEST_F(DashboardTest, WrongOrMalformedLoginsGetNoSession) {
  Dashboard dashboard(Options());
  for (const std::string body :
       {R"({"token": "cluster-secreT"})", R"({"token": ""})", R"({"token": "cluster-secret "})"}) {
    DashboardReply reply = dashboard.Handle("POST", "/dashboard/login", "", body);
    EXPECT_EQ(reply.status, 401) << body;
    EXPECT_EQ(HeaderOf(reply, "Set-Cookie"), "") << body;
    EXPECT_NE(reply.body.find("wrong token"), std::string::npos);
  }
  for (const std::string body : {"", "cluster-secret", R"({"token": 1})", "[]", "{"}) {
    EXPECT_EQ(dashboard.Handle("POST", "/dashboard/login", "", body).status, 400) << body;
  }
  // Oversized: refused before it is parsed, even with the right token inside.
  const std::string huge =
      R"({"token": "cluster-secret", "pad": ")" + std::string(5000, 'x') + "\"}";
  DashboardReply reply = dashboard.Handle("POST", "/dashboard/login", "", huge);
  EXPECT_EQ(reply.status, 413);
  EXPECT_EQ(HeaderOf(reply, "Set-Cookie"), "");
  EXPECT_EQ(dashboard.Handle("GET", "/dashboard/login", "", "").status, 405);

  DashboardOptions no_token = Options();
  no_token.token = "";
  Dashboard tokenless(no_token);
  EXPECT_EQ(tokenless.Handle("POST", "/dashboard/login", "", R"({"token": ""})").status, 401);
}

// Regression: login had no rate limit (3,881 guesses a second). Past the burst an address gets
// 429 with Retry-After, its token unread even when right; another address still logs in.
TEST_F(DashboardTest, FailedLoginsAreRateLimitedPerAddress) {
  AuthFailureLimiterOptions limits;
  limits.burst = 5;
  limits.per_second = 1;
  limits.clock = clock_.Get();
  AuthFailureLimiter limiter(limits);
  DashboardOptions options = Options();
  options.limiter = &limiter;
  Dashboard dashboard(options);
  const std::string wrong = R"({"token": "guess"})", right = R"({"token": "cluster-secret"})";
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(dashboard.Handle("POST", "/dashboard/login", "", wrong, "10.0.0.9").status, 401);
  }
  DashboardReply limited = dashboard.Handle("POST", "/dashboard/login", "", wrong, "10.0.0.9");
  EXPECT_EQ(limited.status, 429) << limited.body;
  EXPECT_EQ(HeaderOf(limited, "Retry-After"), "1");
  EXPECT_NE(limited.body.find("too many failed logins from 10.0.0.9"), std::string::npos)
      << limited.body;
  EXPECT_EQ(dashboard.Handle("POST", "/dashboard/login", "", right, "10.0.0.9").status, 429);
  // Someone else's failures do not lock out the right token from another address.
  DashboardReply other = dashboard.Handle("POST", "/dashboard/login", "", right, "10.0.0.7");
  EXPECT_EQ(other.status, 200) << other.body;
  EXPECT_NE(HeaderOf(other, "Set-Cookie"), "");
  // After the wait, the address may try again.
  clock_.now += absl::Seconds(1);
  EXPECT_EQ(dashboard.Handle("POST", "/dashboard/login", "", right, "10.0.0.9").status, 200);
}

TEST_F(DashboardTest, ForgedExpiredAndLoggedOutCookiesAreNotSessions) {
  Dashboard dashboard(Options());
  const std::string cookie = CookieFrom(
      dashboard.Handle("POST", "/dashboard/login", "", R"({"token": "cluster-secret"})"));
  EXPECT_FALSE(dashboard.HasSession("troupe_session=" + std::string(64, 'a')));
  EXPECT_FALSE(dashboard.HasSession(cookie + "0"));
  EXPECT_FALSE(dashboard.HasSession(""));
  // Another server (another token, another store) never issued it.
  Dashboard other(Options());
  EXPECT_FALSE(other.HasSession(cookie));

  clock_.now += absl::Minutes(59);
  EXPECT_TRUE(dashboard.HasSession(cookie));
  clock_.now += absl::Minutes(1);
  EXPECT_FALSE(dashboard.HasSession(cookie));  // expired on the server, whatever the browser keeps

  const std::string again = CookieFrom(
      dashboard.Handle("POST", "/dashboard/login", "", R"({"token": "cluster-secret"})"));
  DashboardReply out = dashboard.Handle("POST", "/dashboard/logout", again, "");
  EXPECT_EQ(out.status, 200);
  EXPECT_NE(HeaderOf(out, "Set-Cookie").find("Max-Age=0"), std::string::npos);
  EXPECT_FALSE(dashboard.HasSession(again));
}

TEST_F(DashboardTest, ServesOnlyTheEmbeddedFiles) {
  Dashboard dashboard(Options());
  DashboardReply page = dashboard.Handle("GET", "/", "", "");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("app.js"), std::string::npos);
  EXPECT_NE(HeaderOf(page, "Content-Security-Policy").find("default-src 'self'"),
            std::string::npos);
  EXPECT_EQ(HeaderOf(page, "X-Frame-Options"), "DENY");
  DashboardReply script = dashboard.Handle("GET", "/dashboard/app.js", "", "");
  EXPECT_EQ(script.status, 200);
  EXPECT_EQ(script.content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(dashboard.Handle("GET", "/dashboard/app.css", "", "").status, 200);
  for (const std::string path :
       {"/dashboard/../BUILD", "/dashboard/..%2fBUILD", "/dashboard/%2e%2e/BUILD",
        "/dashboard/../../../../etc/passwd", "/dashboard/./app.js",
        "/dashboard/dashboard_assets/app.js", "/dashboard/", "/dashboard/app.js/",
        "/dashboard/APP.JS", "/dashboard/app.js%00"}) {
    EXPECT_EQ(dashboard.Handle("GET", path, "", "").status, 404) << path;
  }
  EXPECT_EQ(dashboard.Handle("POST", "/dashboard/app.js", "", "").status, 405);
}

TEST(DashboardPathsTest, OwnsTheRootAndItsPrefixOnly) {
  EXPECT_TRUE(Dashboard::Owns("/"));
  EXPECT_TRUE(Dashboard::Owns("/dashboard/app.js"));
  EXPECT_FALSE(Dashboard::Owns("/dashboard"));
  EXPECT_FALSE(Dashboard::Owns("/api/jobs/"));
}

}  // namespace
}  // namespace troupe::http
