#include "src/http/dashboard.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/http/dashboard_assets.h"

namespace troupe::http {
namespace {

using nlohmann::json;

constexpr char kPrefix[] = "/dashboard/";

DashboardReply Json(int status, const json& body) {
  return {status, "application/json", {{"Cache-Control", "no-store"}}, body.dump()};
}

DashboardReply JsonError(int status, const std::string& message) {
  return Json(status, json{{"error", message}});
}

}  // namespace

Dashboard::Dashboard(DashboardOptions options)
    : options_(std::move(options)),
      sessions_(options_.session_lifetime, options_.max_sessions, options_.clock) {}

bool Dashboard::Owns(const std::string& path) {
  return path == "/" || absl::StartsWith(path, kPrefix);
}

DashboardReply Dashboard::Handle(const std::string& method, const std::string& path,
                                 const std::string& cookie_header, const std::string& body,
                                 const std::string& remote_address) {
  const std::string name = path == "/" ? "index.html" : path.substr(sizeof(kPrefix) - 1);
  if (name == "login") {
    if (method != "POST") return JsonError(405, "log in with POST {\"token\": \"...\"}");
    return Login(body, remote_address);
  }
  if (name == "logout") {
    if (method != "POST") return JsonError(405, "log out with POST");
    return Logout(cookie_header);
  }
  if (method != "GET" && method != "HEAD")
    return JsonError(405, "the dashboard's files are read-only");
  if (name == "session") return Json(200, json{{"logged_in", HasSession(cookie_header)}});
  return Asset(name);
}

bool Dashboard::HasSession(const std::string& cookie_header) {
  return sessions_.Valid(CookieValue(cookie_header, kSessionCookie));
}

DashboardReply Dashboard::Asset(const std::string& name) const {
  // Only the embedded names exist: "../x", "%2e%2e/x" or "a/b" are simply not among them.
  const auto& assets = DashboardAssets();
  auto it = assets.find(name);
  if (it == assets.end()) return JsonError(404, "no such dashboard file: " + name);
  return {200,
          it->second.content_type,
          {{"Cache-Control", "no-cache"},
           {"X-Content-Type-Options", "nosniff"},
           {"X-Frame-Options", "DENY"},
           {"Content-Security-Policy",
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"}},
          it->second.body};
}

DashboardReply Dashboard::Login(const std::string& body, const std::string& remote_address) {
  if (options_.limiter != nullptr) {
    if (const absl::Duration wait = options_.limiter->RetryAfter(remote_address);
        wait > absl::ZeroDuration()) {
      const int64_t seconds = absl::ToInt64Seconds(wait);
      DashboardReply reply = JsonError(
          429, absl::StrCat("too many failed logins from ", remote_address, "; try again in ",
                            seconds, " s (the token is in <session dir>/token on the head)"));
      reply.headers.emplace_back("Retry-After", absl::StrCat(seconds));
      return reply;
    }
  }
  if (body.size() > kMaxLoginBody) {
    return JsonError(413, absl::StrCat("the login body is ", body.size(), " bytes; at most ",
                                       kMaxLoginBody, " are accepted"));
  }
  json request = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object() || !request.contains("token") || !request["token"].is_string()) {
    return JsonError(400, "send {\"token\": \"<cluster token>\"} as JSON");
  }
  const std::string token = request["token"].get<std::string>();
  if (options_.token.empty() || !ConstantTimeEquals(token, options_.token)) {
    if (options_.limiter != nullptr) options_.limiter->Failed(remote_address);
    return JsonError(401,
                     "wrong token: use the cluster token (<session dir>/token on the head, "
                     "mode 0600)");
  }
  DashboardReply reply = Json(200, json{{"logged_in", true}});
  reply.headers.emplace_back("Set-Cookie", SessionCookie(sessions_.Create(), false));
  return reply;
}

DashboardReply Dashboard::Logout(const std::string& cookie_header) {
  sessions_.Remove(CookieValue(cookie_header, kSessionCookie));
  DashboardReply reply = Json(200, json{{"logged_in", false}});
  reply.headers.emplace_back("Set-Cookie", SessionCookie("", true));
  return reply;
}

std::string Dashboard::SessionCookie(const std::string& value, bool expire) const {
  std::string cookie =
      absl::StrCat(kSessionCookie, "=", value, "; Path=/; HttpOnly; SameSite=Strict");
  if (options_.tls) absl::StrAppend(&cookie, "; Secure");
  if (expire) {
    absl::StrAppend(&cookie, "; Max-Age=0");
  } else {
    // The browser forgets it when the server would (the server's expiry is what counts).
    absl::StrAppend(&cookie, "; Max-Age=", absl::ToInt64Seconds(options_.session_lifetime));
  }
  return cookie;
}

}  // namespace troupe::http
