// Server-side RPC latency histograms, per method, recorded by a gRPC interceptor that a server
// installs through StartGrpcServer, and rendered in Prometheus text format (the GCS publishes
// its own through the KV for the head's /metrics). Thread-safe.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace troupe {

class RpcLatencies {
 public:
  void Observe(const std::string& method, double seconds);
  // `name`_bucket/_sum/_count lines with a `method` label, plus HELP and TYPE.
  std::string RenderPrometheus(const std::string& name, const std::string& help) const;
  // An interceptor factory recording every call's time from arrival to its status being sent.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

 private:
  static constexpr int kBuckets = 9;
  static const double kBounds[kBuckets];
  struct Histogram {
    uint64_t buckets[kBuckets] = {};
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Histogram> methods_;
};

}  // namespace troupe
