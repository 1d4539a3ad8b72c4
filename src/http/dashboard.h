// The web dashboard's server side, independent of the HTTP library: the page and its files at
// `/` and `/dashboard/<file>` (embedded, dashboard_assets.h), and the login that trades the
// cluster token for a session cookie:
//
//   POST /dashboard/login   {"token": "..."} -> 200 + Set-Cookie troupe_session=<id>; HttpOnly;
//                           SameSite=Strict; Path=/ (+ Secure under TLS); 401 for a wrong token;
//                           413 for a body over kMaxLoginBody; 429 + Retry-After, token unread,
//                           while the client's address has failed too often (auth_limiter.h)
//   POST /dashboard/logout  ends the session, clears the cookie
//   GET  /dashboard/session {"logged_in": bool}
//
// The JSON APIs accept the cookie as well as a Bearer token (request_guard.h decides, with
// HasSession's answer); cross-site requests stay refused whatever they carry. See
// docs/dashboard.md. Thread-safe (SessionStore is; the rest is read-only).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "src/http/auth_limiter.h"
#include "src/http/dashboard_sessions.h"

namespace troupe::http {

inline constexpr size_t kMaxLoginBody = 4096;

struct DashboardOptions {
  std::string token;  // the cluster token a login must present
  bool tls = false;   // served over HTTPS: cookies are marked Secure
  absl::Duration session_lifetime = absl::Hours(12);
  size_t max_sessions = 1024;
  SessionStore::Clock clock = absl::Now;
  // Failed logins per client address (borrowed, shared with the Bearer check; must outlive the
  // dashboard). Null: no limit.
  AuthFailureLimiter* limiter = nullptr;
};

// A reply, for the server to copy into its response type.
struct DashboardReply {
  int status = 200;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. Set-Cookie
  std::string body;
};

class Dashboard {
 public:
  explicit Dashboard(DashboardOptions options);

  // True for the paths Handle answers: "/" and "/dashboard/..." (they need no token; the
  // cross-site check still applies to them).
  static bool Owns(const std::string& path);
  // Answers a request for one of the paths Owns. `path` is the decoded path without the query;
  // `cookie_header` the Cookie header ("" if none); `remote_address` the client's address (what
  // failed logins are counted by).
  DashboardReply Handle(const std::string& method, const std::string& path,
                        const std::string& cookie_header, const std::string& body,
                        const std::string& remote_address = "");
  // True if the Cookie header carries a live session.
  bool HasSession(const std::string& cookie_header);

 private:
  DashboardReply Asset(const std::string& name) const;
  DashboardReply Login(const std::string& body, const std::string& remote_address);
  DashboardReply Logout(const std::string& cookie_header);
  std::string SessionCookie(const std::string& value, bool expire) const;

  const DashboardOptions options_;
  SessionStore sessions_;
};

}  // namespace troupe::http
