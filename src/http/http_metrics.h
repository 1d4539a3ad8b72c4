// HttpMetrics: this HTTP server's own numbers for /metrics: requests by route and status code,
// their latencies, and the latencies of the GCS calls it makes. Thread-safe.
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

class HttpMetrics {
 public:
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
