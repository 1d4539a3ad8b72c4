// The HTTP server's admission checks, before any handler runs: the cross-site check (a browser
// on another site must never drive this API, since job submission is code execution) and the
// cluster token (compared in constant time), or the dashboard's session cookie in its place
// (dashboard.h). Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>

#include "src/jobs/job_service.h"

namespace troupe::http {

// What the checks look at in a request.
struct RequestFacts {
  std::string path;
  std::string host;           // Host header
  std::string origin;         // Origin header ("" if none)
  std::string fetch_site;     // Sec-Fetch-Site header ("" if none)
  std::string authorization;  // Authorization header ("" if none)
  bool tls = false;           // came over HTTPS: a same-site Origin is https://<Host>
  bool session = false;  // a live dashboard session cookie came with it (Dashboard::HasSession)
};

// Paths anyone may fetch (the cross-site check still applies): /api/version and the dashboard's
// page, files and login ("/", "/dashboard/...").
bool IsPublicPath(const std::string& path);

// nullopt when the request may proceed; otherwise the reply to send: 403 for a request from
// another site (an Origin that is not this server, or Sec-Fetch-Site: cross-site) whatever the
// method or path (a WebSocket upgrade included), 401 without `Authorization: Bearer <token>` (except IsPublicPath). A session
// cookie stands in for the token only on requests the browser marks `Sec-Fetch-Site:
// same-origin` or that carry exactly this server's Origin (the dashboard's own fetches and its
// WebSocket log tail): SameSite=Strict still sends cookies from another port of the same host,
// and such a request, even one carrying no Origin, must not pass.
std::optional<jobs::Reply> CheckRequest(const RequestFacts& request, const std::string& token);

// True if the request carries credentials: the token (`Authorization: Bearer <token>`, compared
// in constant time) or a session cookie on a same-origin request from the dashboard (see
// CheckRequest). The web server gives such connections more room and time than others.
bool HasCredentials(const RequestFacts& request, const std::string& token);

}  // namespace troupe::http
