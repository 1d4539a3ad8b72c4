// HttpMetrics: this HTTP server's own numbers for /metrics: requests by route and status code,
// their latencies, and the latencies of the GCS calls it makes. Routes are the router's patterns
// (HttpRequest::route), never request paths, so the series stay few whatever clients send: a
// request that matched no route counts under "other". Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "src/rpc/rpc_latency.h"

namespace troupe::http {

// The route label for requests that matched no route.
inline constexpr char kOtherRoute[] = "other";

// `value` as a Prometheus text-format label value (between the quotes): backslash, double quote
// and newline escaped.
std::string EscapeLabelValue(const std::string& value);

class HttpMetrics {
 public:
  // `route` is HttpRequest::route ("" for no route: counted as kOtherRoute).
  void Observe(const std::string& route, int status, double seconds);
  void ObserveGcs(const std::string& method, double seconds) {
    gcs_latency_.Observe(method, seconds);
  }
  // Runs `call` (a GCS call) and records how long it took under `method`.
  template <typename F>
  auto Timed(const char* method, F call) {
    const auto start = std::chrono::steady_clock::now();
    auto result = call();
    ObserveGcs(method,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return result;
  }
  // Appends the Prometheus text of everything observed.
  void Render(std::string* out);

 private:
  absl::Mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_ ABSL_GUARDED_BY(mu_);
  RpcLatencies latency_{"route"}, gcs_latency_{"method"};
};

}  // namespace troupe::http
