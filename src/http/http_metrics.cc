#include "src/http/http_metrics.h"

#include "absl/strings/str_cat.h"

namespace troupe::http {

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void HttpMetrics::Observe(const std::string& route, int status, double seconds) {
  // Escaped once here: both series render the key as it is.
  const std::string label = EscapeLabelValue(route.empty() ? kOtherRoute : route);
  {
    absl::MutexLock lock(&mu_);
    ++requests_[{label, status}];
  }
  latency_.Observe(label, seconds);
}

void HttpMetrics::Render(std::string* out) {
  {
    absl::MutexLock lock(&mu_);
    absl::StrAppend(out, "# HELP troupe_http_requests_total HTTP requests to the head's API.\n",
                    "# TYPE troupe_http_requests_total counter\n");
    for (const auto& [key, n] : requests_) {
      absl::StrAppend(out, "troupe_http_requests_total{route=\"", key.first, "\",code=\"",
                      key.second, "\"} ", n, "\n");
    }
  }
  absl::StrAppend(
      out,
      latency_.RenderPrometheus("troupe_http_request_duration_seconds",
                                "Time to answer HTTP requests to the head's API."),
      gcs_latency_.RenderPrometheus("troupe_gcs_rpc_duration_seconds",
                                    "Latency of GCS RPCs made by the head's HTTP server."));
}

}  // namespace troupe::http
