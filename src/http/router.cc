#include "src/http/router.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace troupe::http {

std::string HttpRequest::Header(std::string_view name) const {
  const absl::string_view wanted(name.data(), name.size());
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, wanted)) return value;
  }
  return "";
}

std::string HttpRequest::Cookie(std::string_view name) const {
  const absl::string_view wanted(name.data(), name.size());
  for (const auto& [key, value] : headers) {
    if (!absl::EqualsIgnoreCase(key, "Cookie")) continue;
    for (absl::string_view pair : absl::StrSplit(value, ';')) {
      pair = absl::StripAsciiWhitespace(pair);
      const size_t eq = pair.find('=');
      if (eq != absl::string_view::npos && pair.substr(0, eq) == wanted) {
        return std::string(pair.substr(eq + 1));
      }
    }
  }
  return "";
}

std::string HttpRequest::Param(const std::string& name, const std::string& fallback) const {
  auto it = query.find(name);
  return it == query.end() ? fallback : it->second;
}

int64_t HttpRequest::IntParam(const std::string& name, int64_t fallback) const {
  auto it = query.find(name);
  if (it == query.end() || it->second.empty()) return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(it->second.c_str(), &end, 10);
  return end != nullptr && *end == '\0' ? value : fallback;
}

std::string HttpRequest::PathParam(const std::string& name) const {
  auto it = path_params.find(name);
  return it == path_params.end() ? "" : it->second;
}

HttpResponse HttpResponse::Json(int status, const nlohmann::json& body) {
  HttpResponse response;
  response.status = status;
  // Log text is not always UTF-8: invalid bytes become U+FFFD instead of failing the reply.
  response.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return response;
}

HttpResponse HttpResponse::Text(int status, std::string body, std::string content_type) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  response.content_type = std::move(content_type);
  return response;
}

std::vector<std::string> SplitPath(std::string_view path) {
  return absl::StrSplit(absl::string_view(path.data(), path.size()), '/', absl::SkipEmpty());
}

void Router::Add(std::string method, std::string pattern, Handler handler) {
  std::vector<std::string> segments = SplitPath(pattern);
  routes_.push_back(
      {std::move(method), std::move(pattern), std::move(segments), std::move(handler), {}});
}

void Router::AddWebSocket(std::string pattern, WebSocketRoute route) {
  std::vector<std::string> segments = SplitPath(pattern);
  routes_.push_back({"", std::move(pattern), std::move(segments), nullptr, std::move(route)});
}

bool Router::Matches(const Route& route, const std::vector<std::string>& segments,
                     std::map<std::string, std::string>* params) {
  if (route.segments.size() != segments.size()) return false;
  std::map<std::string, std::string> captured;
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string& want = route.segments[i];
    if (want.size() > 2 && want.front() == '{' && want.back() == '}') {
      captured[want.substr(1, want.size() - 2)] = segments[i];
    } else if (want != segments[i]) {
      return false;
    }
  }
  *params = std::move(captured);
  return true;
}

Router::Match Router::Find(const std::string& method, const std::string& path,
                           bool websocket_upgrade) const {
  const std::vector<std::string> segments = SplitPath(path);
  Match match;
  if (websocket_upgrade && method == "GET") {
    for (const Route& route : routes_) {
      if (route.method.empty() && Matches(route, segments, &match.path_params)) {
        match.websocket = &route.websocket;
        match.path_known = true;
        match.route = "GET " + route.pattern;
        return match;
      }
    }
  }
  for (const Route& route : routes_) {
    if (route.method.empty()) continue;
    std::map<std::string, std::string> params;
    if (!Matches(route, segments, &params)) continue;
    match.path_known = true;
    if (route.method == method) {
      match.handler = &route.handler;
      match.path_params = std::move(params);
      match.route = route.method + " " + route.pattern;
      return match;
    }
  }
  return match;
}

}  // namespace troupe::http
