#include "src/http/http_server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/common/package.h"
#include "src/common/version.h"
#include "src/http/auth_limiter.h"
#include "src/http/dashboard.h"
#include "src/http/http_metrics.h"
#include "src/http/log_tail.h"
#include "src/http/metrics_page.h"
#include "src/http/node_history.h"
#include "src/http/node_views.h"
#include "src/http/request_guard.h"
#include "src/http/router.h"
#include "src/http/state_views.h"
#include "src/http/task_views.h"
#include "src/http/train_runs_view.h"
#include "src/http/web_server.h"
#include "src/jobs/job_service.h"
#include "src/rpc/gcs_client.h"
#include "src/schema/kv_schema.h"
#include "src/tls/tls_files.h"
#include "troupe/api.h"

namespace troupe {
namespace {

using nlohmann::json;

constexpr size_t kMaxJsonBody = 1 << 20;

// True if something accepts TCP connections at host:port (IPv4).
bool TcpConnectable(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  addrinfo hints{}, *result = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(address.substr(0, colon).c_str(), address.substr(colon + 1).c_str(), &hints,
                  &result) != 0 ||
      result == nullptr) {
    return false;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool connected = fd >= 0 && connect(fd, result->ai_addr, result->ai_addrlen) == 0;
  if (fd >= 0) close(fd);
  freeaddrinfo(result);
  return connected;
}

using http::HttpRequest;
using http::HttpResponse;

HttpResponse Send(const jobs::Reply& reply) { return HttpResponse::Json(reply.status, reply.body); }

// nullopt if the JSON body is within kMaxJsonBody, else the 413 reply.
std::optional<HttpResponse> RefuseLargeJson(const HttpRequest& request) {
  if (request.body.size() <= kMaxJsonBody) return std::nullopt;
  return Send(jobs::Error(413, absl::StrCat("the body is ", request.body.size(),
                                            " bytes; JSON requests are limited to ", kMaxJsonBody,
                                            " bytes")));
}

// A dashboard reply (dashboard.h) as the router's response.
HttpResponse SendDashboard(http::DashboardReply reply) {
  HttpResponse response = HttpResponse::Text(reply.status, std::move(reply.body),
                                             std::move(reply.content_type));
  response.headers = std::move(reply.headers);
  return response;
}

}  // namespace

// The services behind the routes, and the routes.
class HttpServer::Routes {
 public:
  Routes(const HttpServerOptions& options, GcsClient* gcs)
      : options_(options),
        gcs_(gcs),
        jobs_(gcs),
        views_(gcs, &jobs_, &metrics_),
        node_views_(gcs, options.token, &metrics_),
        tasks_(gcs, &metrics_),
        dashboard_(DashboardOptionsFor(options, &limiter_)) {}

  // The token and cross-site checks (request_guard.h), before any route. A Bearer token is
  // checked only while its address has not failed too often (429 then: auth_limiter.h).
  http::Admission Admit(const HttpRequest& request) {
    http::RequestFacts facts{request.path, request.Header("Host"), request.Header("Origin"),
                             request.Header("Sec-Fetch-Site"), request.Header("Authorization"),
                             request.tls};
    facts.session = dashboard_.HasSession(request.Header("Cookie"));
    http::Admission admission;
    const bool guess = !facts.authorization.empty() && !http::IsPublicPath(facts.path);
    if (guess) {
      if (const absl::Duration wait = limiter_.RetryAfter(request.remote_address);
          wait > absl::ZeroDuration()) {
        const int64_t seconds = absl::ToInt64Seconds(wait);
        HttpResponse refusal = Send(jobs::Error(
            429, absl::StrCat("too many requests with a wrong token from ", request.remote_address,
                              "; try again in ", seconds, " s")));
        refusal.headers.emplace_back("Retry-After", absl::StrCat(seconds));
        admission.refusal = std::move(refusal);
        return admission;
      }
    }
    if (auto refusal = http::CheckRequest(facts, options_.token)) {
      if (guess && refusal->status == 401) limiter_.Failed(request.remote_address);
      admission.refusal = Send(*refusal);
      return admission;
    }
    admission.authenticated = http::HasCredentials(facts, options_.token);
    return admission;
  }

  // Labelled by route pattern (never the path: unknown paths share "other").
  void Observe(const HttpRequest& request, int status, double seconds) {
    metrics_.Observe(request.route, status, seconds);
  }

  void AddTo(http::Router& router) {
    // "version" is Ray's Jobs API version and "ray_version" the Ray release whose API this
    // follows: Ray's clients gate features on them.
    router.Add("GET", "/api/version", [](const HttpRequest&) {
      return Send({200, json{{"version", "4"},
                             {"troupe_version", kTroupeVersion},
                             {"ray_version", "2.60.0"},
                             {"ray_commit", "troupe"}}});
    });
    AddJobRoutes(router);
    router.Add("GET", "/api/v0/nodes", [this](const HttpRequest&) { return Send(views_.Nodes()); });
    router.Add("GET", "/api/v0/nodes/history",
               [this](const HttpRequest&) { return Send({200, history_.ToJson()}); });
    // Prometheus' http_sd_configs: every node's /metrics (docs/jobs.md, "Metrics").
    router.Add("GET", "/api/v0/prometheus_targets",
               [this](const HttpRequest&) { return Send(views_.PrometheusTargets()); });
    router.Add("GET", "/api/v0/actors",
               [this](const HttpRequest&) { return Send(views_.Actors()); });
    router.Add("GET", "/api/v0/placement_groups",
               [this](const HttpRequest&) { return Send(views_.PlacementGroups()); });
    // `troupe remove placement-group ID|NAME`.
    router.Add("DELETE", "/api/v0/placement_groups/{id}", [this](const HttpRequest& req) {
      return Send(views_.RemovePlacementGroup(req.PathParam("id")));
    });
    router.Add("GET", "/api/v0/jobs", [this](const HttpRequest&) { return Send(views_.Jobs()); });
    router.Add("GET", "/api/v0/objects",
               [this](const HttpRequest&) { return Send(node_views_.Objects()); });
    router.Add("GET", "/api/v0/workers",
               [this](const HttpRequest&) { return Send(node_views_.Workers()); });
    router.Add("GET", "/api/v0/logs", [this](const HttpRequest& req) {
      return Send(node_views_.LogFiles(req.Param("node_id")));
    });
    router.Add("GET", "/api/v0/logs/file", [this](const HttpRequest& req) {
      return Send(node_views_.LogFile(req.Param("node_id"), req.Param("filename"),
                                      static_cast<int>(req.IntParam("lines", 0)),
                                      req.IntParam("offset", 0), req.IntParam("max_bytes", 0)));
    });
    // Tasks (task_views.h); summarize before {id}: routes match in the order added.
    router.Add("GET", "/api/v0/tasks", [this](const HttpRequest& req) {
      return Send(tasks_.List(req.query));
    });
    router.Add("GET", "/api/v0/tasks/summarize", [this](const HttpRequest& req) {
      return Send(tasks_.Summarize(req.query));
    });
    router.Add("GET", "/api/v0/tasks/{id}", [this](const HttpRequest& req) {
      return Send(tasks_.Get(req.PathParam("id")));
    });
    router.Add("GET", "/api/v0/timeline", [this](const HttpRequest& req) {
      return Send(tasks_.Timeline(req.query));
    });
    router.Add("GET", "/api/cluster_status",
               [this](const HttpRequest&) { return Send(views_.ClusterStatus()); });
    // The dashboard (dashboard.h): its page, files, login and logout.
    auto dashboard = [this](const HttpRequest& req) {
      return SendDashboard(dashboard_.Handle(req.method, req.path, req.Header("Cookie"), req.body,
                                             req.remote_address));
    };
    router.Add("GET", "/", dashboard);
    router.Add("GET", "/dashboard/{file}", dashboard);
    router.Add("POST", "/dashboard/{file}", dashboard);
    router.Add("GET", "/api/v0/train_runs",
               [this](const HttpRequest&) { return Send(http::TrainRuns(*gcs_)); });
    router.Add("GET", "/metrics", [this](const HttpRequest&) {
      return HttpResponse::Text(200, http::RenderMetricsPage(views_, jobs_, *gcs_, metrics_),
                                "text/plain; version=0.0.4; charset=utf-8");
    });
  }

 private:
  void AddJobRoutes(http::Router& router) {
    router.Add("POST", "/api/jobs", [this](const HttpRequest& req) {
      if (auto refusal = RefuseLargeJson(req)) return *refusal;
      return Send(jobs_.Submit(req.body));
    });
    router.Add("GET", "/api/jobs", [this](const HttpRequest&) { return Send(jobs_.List()); });
    router.Add("GET", "/api/jobs/{id}",
               [this](const HttpRequest& req) { return Send(jobs_.Get(req.PathParam("id"))); });
    router.Add("GET", "/api/jobs/{id}/logs",
               [this](const HttpRequest& req) { return Send(jobs_.Logs(req.PathParam("id"))); });
    // The tail: a WebSocket when the client asks to upgrade (Ray's clients), else chunked text.
    router.AddWebSocket("/api/jobs/{id}/logs/tail", http::LogTailWebSocket(&jobs_));
    router.Add("GET", "/api/jobs/{id}/logs/tail",
               [this](const HttpRequest& req) { return http::LogTailStream(&jobs_, req); });
    router.Add("POST", "/api/jobs/{id}/stop",
               [this](const HttpRequest& req) { return Send(jobs_.Stop(req.PathParam("id"))); });
    router.Add("DELETE", "/api/jobs/{id}",
               [this](const HttpRequest& req) { return Send(jobs_.Delete(req.PathParam("id"))); });
    router.Add("PUT", "/api/packages/gcs/{name}", [this](const HttpRequest& req) {
      return Send(jobs_.PutPackage(req.PathParam("name"), req.body));
    });
    router.Add("GET", "/api/packages/gcs/{name}", [this](const HttpRequest& req) {
      return Send(jobs_.HasPackage(req.PathParam("name")));
    });
  }

  static http::DashboardOptions DashboardOptionsFor(const HttpServerOptions& options,
                                                    http::AuthFailureLimiter* limiter) {
    http::DashboardOptions dashboard;
    dashboard.token = options.token;
    dashboard.tls = !options.tls_dir.empty();
    dashboard.limiter = limiter;
    return dashboard;
  }

  const HttpServerOptions options_;
  GcsClient* const gcs_;
  // Failed token checks per client address: dashboard logins and wrong Bearer tokens.
  http::AuthFailureLimiter limiter_;
  jobs::JobService jobs_;
  http::HttpMetrics metrics_;
  http::StateViews views_;
  http::NodeViews node_views_;
  http::TaskViews tasks_;
  http::Dashboard dashboard_;
  http::NodeHistory history_;  // recorded by the watchdog thread (HttpServer::WatchGcs)

 public:
  http::NodeHistory& history() { return history_; }
};

HttpServer::HttpServer(HttpServerOptions options) : options_(std::move(options)) {}

HttpServer::~HttpServer() { StopWatchdog(); }

void HttpServer::StopWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (watchdog_.joinable() && watchdog_.get_id() != std::this_thread::get_id()) watchdog_.join();
}

absl::Status HttpServer::Start() {
  gcs_ = std::make_unique<GcsClient>(options_.gcs_address, options_.token, absl::Seconds(5));
  if (auto info = gcs_->GetClusterInfo(); !info.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot reach the GCS at ", options_.gcs_address,
                                               ": ", info.status().message()));
  }
  // The server is a Troupe driver too: it starts job supervisors as actors.
  Config config;
  config.address = options_.gcs_address;
  config.token = options_.token;
  config.log_to_driver = false;
  // A system namespace: this driver's job is marked "is_system" and hidden from `troupe list`.
  config.namespace_name = jobs::kSupervisorNamespace;
  try {
    Init(config);
  } catch (const TroupeError& e) {
    return absl::UnavailableError(std::string("cannot join the cluster: ") + e.what());
  }
  routes_ = std::make_unique<Routes>(options_, gcs_.get());
  router_ = std::make_unique<http::Router>();
  routes_->AddTo(*router_);
  http::WebServerOptions web;
  web.bind = options_.bind;
  web.port = options_.port;
  if (!options_.tls_dir.empty()) {
    web.cert_path = NodeCertPath(options_.tls_dir);
    web.key_path = NodeKeyPath(options_.tls_dir);
  }
  web.max_body_bytes = kMaxPackageBytes + (1 << 20);
  web.admit = [this](const HttpRequest& request) { return routes_->Admit(request); };
  web.observe = [this](const HttpRequest& request, int status, double seconds) {
    routes_->Observe(request, status, seconds);
  };
  web_ = std::make_unique<http::WebServer>(std::move(web), router_.get());
  if (absl::Status bound = web_->Bind(); !bound.ok()) {
    Shutdown();
    return bound;
  }
  watchdog_ = std::thread([this] { WatchGcs(); });
  return absl::OkStatus();
}

void HttpServer::WatchGcs() {
  GcsClient probe(options_.gcs_address, options_.token, absl::Seconds(2));
  absl::Time last_answer = absl::Now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Seconds(1))) return;
    }
    // A port that refuses connections fails at once; gRPC alone would back off for seconds.
    if (TcpConnectable(options_.gcs_address) && probe.GetClusterInfo().ok()) {
      last_answer = absl::Now();
      // The nodes' CPU, memory and object store use, for the dashboard's last hour.
      if (routes_->history().Due(last_answer)) {
        if (auto usage = probe.GetAllResourceUsage(); usage.ok()) {
          routes_->history().Record(last_answer, *usage);
        }
      }
    } else if (absl::Now() - last_answer > options_.gcs_lost_timeout) {
      gcs_lost_ = true;
      web_->Stop();
      return;
    }
  }
}

absl::Status HttpServer::Serve() {
  web_->Serve();
  if (gcs_lost_) {
    return absl::UnavailableError(absl::StrCat("the GCS at ", options_.gcs_address,
                                               " has not answered for ",
                                               absl::FormatDuration(options_.gcs_lost_timeout),
                                               "; the head is gone, so the HTTP server exits"));
  }
  StopWatchdog();
  Shutdown();
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (web_) web_->Stop();
}

}  // namespace troupe
