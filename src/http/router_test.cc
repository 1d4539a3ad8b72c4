#include "src/http/router.h"

#include "gtest/gtest.h"

namespace troupe::http {
namespace {

Handler Named(const std::string& name) {
  return [name](const HttpRequest&) { return HttpResponse::Text(200, name, "text/plain"); };
}

std::string Route(const Router& router, const std::string& method, const std::string& path) {
  Router::Match match = router.Find(method, path, false);
  if (match.handler == nullptr) return match.path_known ? "405" : "404";
  HttpRequest request;
  request.path_params = match.path_params;
  std::string body = (*match.handler)(request).body;
  for (const auto& [key, value] : match.path_params) body += " " + key + "=" + value;
  return body;
}

TEST(RouterTest, MatchesMethodsSegmentsAndParametersInOrder) {
  Router router;
  router.Add("GET", "/api/jobs", Named("list"));
  router.Add("POST", "/api/jobs", Named("submit"));
  router.Add("GET", "/api/jobs/{id}", Named("get"));
  router.Add("GET", "/api/jobs/{id}/logs", Named("logs"));
  router.Add("GET", "/api/v0/tasks/summarize", Named("summary"));
  router.Add("GET", "/api/v0/tasks/{id}", Named("task"));
  EXPECT_EQ(Route(router, "GET", "/api/jobs"), "list");
  EXPECT_EQ(Route(router, "GET", "/api/jobs/"), "list");  // a trailing slash is ignored
  EXPECT_EQ(Route(router, "POST", "/api/jobs/"), "submit");
  EXPECT_EQ(Route(router, "GET", "/api/jobs/abc"), "get id=abc");
  EXPECT_EQ(Route(router, "GET", "/api/jobs/abc/logs/"), "logs id=abc");
  EXPECT_EQ(Route(router, "GET", "/api/v0/tasks/summarize"), "summary");
  EXPECT_EQ(Route(router, "GET", "/api/v0/tasks/t1"), "task id=t1");
  EXPECT_EQ(Route(router, "DELETE", "/api/jobs"), "405");
  EXPECT_EQ(Route(router, "GET", "/api/jobs/abc/nothing"), "404");
  EXPECT_EQ(Route(router, "GET", "/"), "404");
}

TEST(RouterTest, UpgradesGoToWebSocketRoutesAndPlainGetsToHandlers) {
  Router router;
  router.AddWebSocket("/tail/{id}", WebSocketRoute{});
  router.Add("GET", "/tail/{id}", Named("chunked"));
  Router::Match upgrade = router.Find("GET", "/tail/7", true);
  EXPECT_NE(upgrade.websocket, nullptr);
  EXPECT_EQ(upgrade.path_params["id"], "7");
  EXPECT_EQ(Route(router, "GET", "/tail/7"), "chunked id=7");
  EXPECT_EQ(router.Find("GET", "/other", true).websocket, nullptr);
}

// Metrics are labelled by the route found, so a label never carries what a client typed.
TEST(RouterTest, AMatchNamesItsRoutePatternNeverThePath) {
  Router router;
  router.Add("GET", "/api/jobs/{id}", Named("get"));
  router.AddWebSocket("/tail/{id}", WebSocketRoute{});
  EXPECT_EQ(router.Find("GET", "/api/jobs/\"evil\\", false).route, "GET /api/jobs/{id}");
  EXPECT_EQ(router.Find("GET", "/tail/x", true).route, "GET /tail/{id}");
  EXPECT_EQ(router.Find("DELETE", "/api/jobs/x", false).route, "");  // 405: no route
  EXPECT_EQ(router.Find("GET", "/random/path/1", false).route, "");
}

TEST(RouterTest, RequestsExposeHeadersCookiesAndParameters) {
  HttpRequest request;
  request.headers = {{"Content-Type", "text/plain"}, {"cookie", "a=1; session=xyz ; b="}};
  request.query = {{"offset", "12"}, {"bad", "1x"}, {"name", "v"}};
  EXPECT_EQ(request.Header("content-type"), "text/plain");
  EXPECT_EQ(request.Header("X-Missing"), "");
  EXPECT_EQ(request.Cookie("session"), "xyz");
  EXPECT_EQ(request.Cookie("b"), "");
  EXPECT_EQ(request.Cookie("c"), "");
  EXPECT_EQ(request.IntParam("offset", 0), 12);
  EXPECT_EQ(request.IntParam("bad", -1), -1);
  EXPECT_EQ(request.IntParam("none", 5), 5);
  EXPECT_EQ(request.Param("name"), "v");
  EXPECT_EQ(HttpResponse::Json(200, nlohmann::json{{"s", "\xff"}}).body, "{\"s\":\"\xEF\xBF\xBD\"}");
}

}  // namespace
}  // namespace troupe::http
