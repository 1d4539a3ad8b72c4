#include "src/rpc/rpc_latency.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace troupe {
namespace {

class LatencyInterceptor : public grpc::experimental::Interceptor {
 public:
  LatencyInterceptor(grpc::experimental::ServerRpcInfo* info, RpcLatencies* latencies)
      : method_(info->method() ? info->method() : "?"),
        latencies_(latencies),
        start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      latencies_->Observe(
          method_,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    methods->Proceed();
  }

 private:
  std::string method_;
  RpcLatencies* latencies_;
  std::chrono::steady_clock::time_point start_;
};

class LatencyInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit LatencyInterceptorFactory(RpcLatencies* latencies) : latencies_(latencies) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new LatencyInterceptor(info, latencies_);
  }

 private:
  RpcLatencies* latencies_;
};

}  // namespace

const double RpcLatencies::kBounds[kBuckets] = {0.0001, 0.0005, 0.001, 0.005, 0.01,
                                                0.05,   0.1,    0.5,   1};

void RpcLatencies::Observe(const std::string& key, double seconds) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  Histogram& h = series_[key];
  for (int i = 0; i < kBuckets; ++i) h.buckets[i] += seconds <= kBounds[i];
  ++h.count;
  h.sum += seconds;
}

std::string RpcLatencies::RenderPrometheus(const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
  for (const auto& [key, h] : series_) {
    const std::string labels = absl::StrCat(label_, "=\"", key, "\"");
    for (int i = 0; i < kBuckets; ++i) {
      absl::StrAppend(&out, name, "_bucket{", labels, ",le=\"", kBounds[i], "\"} ", h.buckets[i],
                      "\n");
    }
    absl::StrAppend(&out, name, "_bucket{", labels, ",le=\"+Inf\"} ", h.count, "\n", name, "_sum{",
                    labels, "} ", absl::StrFormat("%.9g", h.sum), "\n", name, "_count{", labels,
                    "} ", h.count, "\n");
  }
  return out;
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcLatencies::InterceptorFactory() {
  return std::make_unique<LatencyInterceptorFactory>(this);
}

}  // namespace troupe
