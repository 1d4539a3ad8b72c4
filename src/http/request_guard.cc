#include "src/http/request_guard.h"

#include "absl/strings/match.h"
#include "src/common/constant_time.h"

namespace troupe::http {

bool IsPublicPath(const std::string& path) {
  return path == "/api/version" || path == "/" || absl::StartsWith(path, "/dashboard/");
}

namespace {

std::string OwnOrigin(const RequestFacts& request) {
  return (request.tls ? "https://" : "http://") + request.host;
}

}  // namespace

bool HasCredentials(const RequestFacts& request, const std::string& token) {
  // The dashboard's own requests: marked same-origin by the browser, or carrying exactly this
  // server's Origin (a WebSocket upgrade always does; Chromium marks it no Sec-Fetch-Site).
  if (request.session &&
      (request.fetch_site == "same-origin" || request.origin == OwnOrigin(request))) {
    return true;
  }
  return ConstantTimeEquals(request.authorization, "Bearer " + token);
}

std::optional<jobs::Reply> CheckRequest(const RequestFacts& request, const std::string& token) {
  if ((!request.origin.empty() && request.origin != OwnOrigin(request)) ||
      request.fetch_site == "cross-site") {
    return jobs::Error(403, "cross-origin request refused (Origin: " + request.origin +
                                "): the jobs API only answers same-origin browser requests and "
                                "non-browser clients");
  }
  if (IsPublicPath(request.path) || HasCredentials(request, token)) return std::nullopt;
  return jobs::Error(
      401, std::string(request.authorization.empty() ? "no token" : "wrong token") +
               ": send the cluster token as 'Authorization: Bearer <token>' (it is in <session "
               "dir>/token on the head, mode 0600; the troupe CLI sends it for you)" +
               (request.session ? "; a dashboard session cookie counts only on same-origin "
                                  "requests from the dashboard"
                                : ""));
}

}  // namespace troupe::http
