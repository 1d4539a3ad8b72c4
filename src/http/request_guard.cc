#include "src/http/request_guard.h"

#include "absl/strings/match.h"

namespace troupe::http {

bool IsPublicPath(const std::string& path) {
  return path == "/api/version" || path == "/" || absl::StartsWith(path, "/dashboard/");
}

std::optional<jobs::Reply> CheckRequest(const RequestFacts& request, const std::string& token) {
  const std::string own_origin = (request.tls ? "https://" : "http://") + request.host;
  if ((!request.origin.empty() && request.origin != own_origin) ||
      request.fetch_site == "cross-site") {
    return jobs::Error(403, "cross-origin request refused (Origin: " + request.origin +
                                "): the jobs API only answers same-origin browser requests and "
                                "non-browser clients");
  }
  if (IsPublicPath(request.path)) return std::nullopt;
  // The dashboard's own requests: marked same-origin by the browser, or carrying exactly this
  // server's Origin (a WebSocket upgrade always does; Chromium marks it no Sec-Fetch-Site).
  if (request.session && (request.fetch_site == "same-origin" || request.origin == own_origin)) {
    return std::nullopt;
  }
  if (request.authorization != "Bearer " + token) {
    return jobs::Error(
        401, std::string(request.authorization.empty() ? "no token" : "wrong token") +
                 ": send the cluster token as 'Authorization: Bearer <token>' (it is in <session "
                 "dir>/token on the head, mode 0600; the troupe CLI sends it for you)" +
                 (request.session ? "; a dashboard session cookie counts only on same-origin "
                                    "requests from the dashboard"
                                  : ""));
  }
  return std::nullopt;
}

std::string RouteLabel(const std::string& method, const std::string& path) {
  std::string route = path;
  if (route.rfind("/api/jobs/", 0) == 0 && route.size() > 10) {
    const size_t end = route.find('/', 10);
    route = "/api/jobs/{id}" + (end == std::string::npos ? "" : route.substr(end));
  } else if (route.rfind("/api/v0/tasks/", 0) == 0 && route.size() > 14 &&
             route.rfind("/api/v0/tasks/summarize", 0) != 0) {
    route = "/api/v0/tasks/{id}";
  } else if (route.rfind("/api/v0/placement_groups/", 0) == 0 && route.size() > 25) {
    route = "/api/v0/placement_groups/{id}";  // DELETE: `troupe remove placement-group`
  } else if (route.rfind("/dashboard/", 0) == 0) {
    route = "/dashboard/{file}";
  } else if (route.rfind("/api/packages/", 0) == 0) {
    route = "/api/packages/{name}";
  }
  return method + " " + route;
}

}  // namespace troupe::http
