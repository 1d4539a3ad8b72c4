// The head's HTTP routes, independent of the HTTP library: a request and response as plain
// structs, and a Router mapping "METHOD /path/{param}/..." to handlers. The server
// (web_server.h) parses requests with Boost.Beast, asks the Router, and writes what the handler
// returns: a whole body, a streamed (chunked) body, or, for a WebSocket route, text frames.
//
// Patterns are literal segments and `{name}` segments (one path segment each, captured into
// HttpRequest::path_params); a trailing '/' on the request path is ignored. Routes match in the
// order added, so add "/api/v0/tasks/summarize" before "/api/v0/tasks/{id}".
//
// Routes are added before the server starts and never after; Match is then read-only and safe
// from every connection thread at once. Handlers run on the connection's thread and may block.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace troupe::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // percent-decoded, without the query
  std::string target;  // as sent: path and query
  std::multimap<std::string, std::string> query;  // decoded (ParseQuery in task_views.h)
  std::vector<std::pair<std::string, std::string>> headers;
  std::map<std::string, std::string> path_params;  // {name} segments of the matched pattern
  std::string body;
  bool tls = false;            // came over HTTPS
  std::string remote_address;  // the client's IP address, as text ("127.0.0.1")
  // The matched route as "METHOD /pattern" ("GET /api/jobs/{id}"), "" if none matched: a bounded
  // set, so metrics can be labelled by it (set by the server before admission).
  std::string route;

  // A header's value ("" if absent); names compare case-insensitively.
  std::string Header(std::string_view name) const;
  // A cookie's value from the Cookie header(s) ("" if absent).
  std::string Cookie(std::string_view name) const;
  // A query parameter's (first) value, or `fallback` when absent.
  std::string Param(const std::string& name, const std::string& fallback = "") const;
  // A query parameter as an integer; `fallback` when absent or not an integer.
  int64_t IntParam(const std::string& name, int64_t fallback) const;
  // path_params.at(name) ("" if the pattern has no such segment).
  std::string PathParam(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Extra headers, e.g. {"Set-Cookie", "..."}, {"Cache-Control", "no-store"}.
  std::vector<std::pair<std::string, std::string>> headers;
  // Set for a streamed body (sent with chunked transfer encoding instead of `body`): called
  // until it returns false; each call may block, and puts the next piece in *piece ("" allowed).
  // The server stops calling once the client has gone.
  std::function<bool(std::string* piece)> stream;

  // JSON (invalid UTF-8 in strings becomes U+FFFD rather than failing).
  static HttpResponse Json(int status, const nlohmann::json& body);
  // Any other content, e.g. Text(200, html, "text/html; charset=utf-8").
  static HttpResponse Text(int status, std::string body, std::string content_type);
};

// The server's side of an open WebSocket, handed to a WebSocketRoute's `serve`.
class WebSocketSink {
 public:
  virtual ~WebSocketSink() = default;
  // Sends one text frame (must be valid UTF-8). False once the peer has gone or closed.
  virtual bool SendText(std::string_view text) = 0;
  // True once the peer has closed, gone, or broken the protocol (e.g. sent an oversized frame),
  // or the server is stopping: `serve` should return. Never blocks.
  virtual bool Closed() = 0;
};

struct WebSocketRoute {
  // Before the upgrade: a response to send instead (e.g. 404 for an unknown job), or nullopt.
  std::function<std::optional<HttpResponse>(const HttpRequest&)> admit;
  // After the upgrade, on the connection's thread: sends frames until done; the server then
  // closes the WebSocket normally.
  std::function<void(const HttpRequest&, WebSocketSink&)> serve;
};

using Handler = std::function<HttpResponse(const HttpRequest&)>;

class Router {
 public:
  // Adds a route; `pattern` is like "/api/jobs/{id}/logs". Not thread-safe: before serving only.
  void Add(std::string method, std::string pattern, Handler handler);
  // A WebSocket route: a GET with `Upgrade: websocket` on `pattern` upgrades (after `admit`);
  // a plain GET on the same path goes to the route added with Add, if any.
  void AddWebSocket(std::string pattern, WebSocketRoute route);

  struct Match {
    const Handler* handler = nullptr;          // set for a plain route
    const WebSocketRoute* websocket = nullptr;  // set for an upgrade to a WebSocket route
    std::map<std::string, std::string> path_params;
    bool path_known = false;  // some route has this path (a miss is then 405, not 404)
    // "METHOD /pattern" of the route found ("" if none): what HttpRequest::route holds.
    std::string route;
  };
  // The route for `method` and `path` (an upgrade request looks for WebSocket routes first).
  Match Find(const std::string& method, const std::string& path, bool websocket_upgrade) const;

 private:
  struct Route {
    std::string method;  // "" for a WebSocket route
    std::string pattern;
    std::vector<std::string> segments;
    Handler handler;
    WebSocketRoute websocket;
  };
  static bool Matches(const Route& route, const std::vector<std::string>& segments,
                      std::map<std::string, std::string>* params);
  std::vector<Route> routes_;
};

// The path's segments ("/a/b/" -> {"a", "b"}).
std::vector<std::string> SplitPath(std::string_view path);

}  // namespace troupe::http
