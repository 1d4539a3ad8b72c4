// Latency histograms keyed by one label (an RPC method, an HTTP route), rendered in Prometheus
// text format. A gRPC server records its calls' server-side latency through the interceptor
// StartGrpcServer installs (the GCS publishes its own through the KV for the head's /metrics);
// the head's HTTP server keeps its own. Thread-safe.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace troupe {

class RpcLatencies {
 public:
  explicit RpcLatencies(std::string label = "method") : label_(std::move(label)) {}
  void Observe(const std::string& key, double seconds);
  // Calls observed so far, all methods together (lock-free: read on a timer as a work counter).
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }
  // `name`_bucket/_sum/_count lines labelled `label`="<key>", plus HELP and TYPE.
  std::string RenderPrometheus(const std::string& name, const std::string& help) const;
  // An interceptor factory recording every call's time from arrival to its status being sent.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

 private:
  static constexpr int kBuckets = 10;
  static const double kBounds[kBuckets];
  struct Histogram {
    uint64_t buckets[kBuckets] = {};
    uint64_t count = 0;
    double sum = 0;
  };
  const std::string label_;
  std::atomic<uint64_t> calls_{0};
  mutable std::mutex mu_;
  std::map<std::string, Histogram> series_;
};

}  // namespace troupe
