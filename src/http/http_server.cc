#include "src/http/http_server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/common/package.h"
#include "src/http/dashboard.h"
#include "src/http/http_metrics.h"
#include "src/http/log_tail.h"
#include "src/http/metrics_page.h"
#include "src/http/node_views.h"
#include "src/http/request_guard.h"
#include "src/http/state_views.h"
#include "src/http/task_views.h"
#include "src/http/train_runs_view.h"
#include "src/jobs/job_service.h"
#include "src/rpc/gcs_client.h"
#include "src/schema/kv_schema.h"
#include "src/tls/tls_files.h"
#include "troupe/api.h"

namespace troupe {
namespace {

using nlohmann::json;

constexpr size_t kMaxJsonBody = 1 << 20;
constexpr char kVersion[] = "0.1.0";
constexpr char kStartHeader[] = "X-Troupe-Start";

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

void Send(httplib::Response& res, const jobs::Reply& reply) {
  res.status = reply.status;
  // Log text is not always UTF-8: invalid bytes become U+FFFD instead of failing the reply.
  res.set_content(reply.body.dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

// A query parameter as an integer; `fallback` when absent or not a number.
int64_t IntParam(const httplib::Request& req, const char* name, int64_t fallback) {
  if (!req.has_param(name)) return fallback;
  char* end = nullptr;
  const std::string text = req.get_param_value(name);
  const long long value = std::strtoll(text.c_str(), &end, 10);
  return end != nullptr && *end == '\0' && !text.empty() ? value : fallback;
}

bool JsonBody(const httplib::Request& req, httplib::Response& res) {
  if (req.body.size() > kMaxJsonBody) {
    Send(res, jobs::Error(413, absl::StrCat("the body is ", req.body.size(),
                                            " bytes; JSON requests are limited to ", kMaxJsonBody,
                                            " bytes")));
    return false;
  }
  return true;
}

std::chrono::steady_clock::time_point StartOf(const httplib::Request& req) {
  auto it = req.headers.find(kStartHeader);
  if (it == req.headers.end()) return std::chrono::steady_clock::now();
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(std::stoll(it->second)));
}

// Copies a library-neutral dashboard reply (dashboard.h) into httplib's response.
void SendDashboard(httplib::Response& res, const http::DashboardReply& reply) {
  res.status = reply.status;
  for (const auto& [name, value] : reply.headers) res.set_header(name, value);
  res.set_content(reply.body, reply.content_type);
}

}  // namespace

// The routes, over the services that answer them.
class HttpServer::Routes {
 public:
  Routes(const HttpServerOptions& options, GcsClient* gcs)
      : options_(options),
        gcs_(gcs),
        jobs_(gcs),
        views_(gcs, &jobs_, &metrics_),
        node_views_(gcs, options.token, &metrics_),
        tasks_(gcs, &metrics_),
        dashboard_({options.token, /*tls=*/!options.tls_dir.empty()}) {}

  void Install(httplib::Server& http) {
    http.set_payload_max_length(kMaxPackageBytes + (1 << 20));
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const_cast<httplib::Request&>(req).headers.emplace(
          kStartHeader,
          std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
      http::RequestFacts facts{
          req.path, req.get_header_value("Host"), req.get_header_value("Origin"),
          req.get_header_value("Sec-Fetch-Site"), req.get_header_value("Authorization")};
      facts.session = dashboard_.HasSession(req.get_header_value("Cookie"));
      if (auto refusal = http::CheckRequest(facts, options_.token)) {
        Send(res, *refusal);
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - StartOf(req)).count();
      metrics_.Observe(http::RouteLabel(req.method, req.path), res.status, seconds);
    });
    // "version" is Ray's Jobs API version and "ray_version" the Ray release whose API this
    // follows: Ray's clients gate features on them.
    http.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
      Send(res, {200, json{{"version", "4"},
                           {"troupe_version", kVersion},
                           {"ray_version", "2.60.0"},
                           {"ray_commit", "troupe"}}});
    });
    http.Post("/api/jobs/?", [this](const httplib::Request& req, httplib::Response& res) {
      if (!JsonBody(req, res)) return;
      Send(res, jobs_.Submit(req.body));
    });
    http.Get("/api/jobs/?",
             [this](const httplib::Request&, httplib::Response& res) { Send(res, jobs_.List()); });
    http.Get(R"(/api/jobs/([^/]+)/?)", [this](const httplib::Request& req, httplib::Response& res) {
      Send(res, jobs_.Get(req.matches[1]));
    });
    http.Get(R"(/api/jobs/([^/]+)/logs/?)",
             [this](const httplib::Request& req, httplib::Response& res) {
               Send(res, jobs_.Logs(req.matches[1]));
             });
    http.Get(R"(/api/jobs/([^/]+)/logs/tail/?)",
             [this](const httplib::Request& req, httplib::Response& res) {
               http::ServeLogTail(&jobs_, req.matches[1], res);
             });
    http.Post(R"(/api/jobs/([^/]+)/stop/?)",
              [this](const httplib::Request& req, httplib::Response& res) {
                Send(res, jobs_.Stop(req.matches[1]));
              });
    http.Delete(R"(/api/jobs/([^/]+)/?)",
                [this](const httplib::Request& req, httplib::Response& res) {
                  Send(res, jobs_.Delete(req.matches[1]));
                });
    http.Put(R"(/api/packages/gcs/([^/]+))",
             [this](const httplib::Request& req, httplib::Response& res) {
               Send(res, jobs_.PutPackage(req.matches[1], req.body));
             });
    http.Get(R"(/api/packages/gcs/([^/]+))",
             [this](const httplib::Request& req, httplib::Response& res) {
               Send(res, jobs_.HasPackage(req.matches[1]));
             });
    http.Get("/api/v0/nodes", [this](const httplib::Request&, httplib::Response& res) {
      Send(res, views_.Nodes());
    });
    http.Get("/api/v0/actors", [this](const httplib::Request&, httplib::Response& res) {
      Send(res, views_.Actors());
    });
    http.Get("/api/v0/placement_groups", [this](const httplib::Request&, httplib::Response& res) {
      Send(res, views_.PlacementGroups());
    });
    http.Get("/api/v0/jobs",
             [this](const httplib::Request&, httplib::Response& res) { Send(res, views_.Jobs()); });
    http.Get("/api/v0/objects", [this](const httplib::Request&, httplib::Response& res) {
      Send(res, node_views_.Objects());
    });
    http.Get("/api/v0/workers", [this](const httplib::Request&, httplib::Response& res) {
      Send(res, node_views_.Workers());
    });
    http.Get("/api/v0/logs", [this](const httplib::Request& req, httplib::Response& res) {
      Send(res, node_views_.LogFiles(req.get_param_value("node_id")));
    });
    http.Get("/api/v0/logs/file", [this](const httplib::Request& req, httplib::Response& res) {
      Send(res, node_views_.LogFile(req.get_param_value("node_id"), req.get_param_value("filename"),
                                    static_cast<int>(IntParam(req, "lines", 0)),
                                    IntParam(req, "offset", 0), IntParam(req, "max_bytes", 0)));
    });
    // Tasks (task_views.h); summarize before {id}: routes match in the order registered.
    http.Get("/api/v0/tasks/?", [this](const httplib::Request& req, httplib::Response& res) {
      Send(res, tasks_.List(http::ParseQuery(req.target)));
    });
    http.Get("/api/v0/tasks/summarize/?",
             [this](const httplib::Request& req, httplib::Response& res) {
               Send(res, tasks_.Summarize(http::ParseQuery(req.target)));
             });
    http.Get(R"(/api/v0/tasks/([^/]+)/?)",
             [this](const httplib::Request& req, httplib::Response& res) {
               Send(res, tasks_.Get(req.matches[1]));
             });
    http.Get("/api/v0/timeline/?", [this](const httplib::Request& req, httplib::Response& res) {
      Send(res, tasks_.Timeline(http::ParseQuery(req.target)));
    });
    http.Get("/api/cluster_status", [this](const httplib::Request&, httplib::Response& res) {
      Send(res, views_.ClusterStatus());
    });
    // The dashboard (dashboard.h): its page, files, login and logout.
    auto dashboard = [this](const httplib::Request& req, httplib::Response& res) {
      SendDashboard(
          res, dashboard_.Handle(req.method, req.path, req.get_header_value("Cookie"), req.body));
    };
    http.Get("/", dashboard);
    http.Get(R"(/dashboard/.*)", dashboard);
    http.Post(R"(/dashboard/.*)", dashboard);
    http.Get("/api/v0/train_runs", [this](const httplib::Request&, httplib::Response& res) {
      Send(res, http::TrainRuns(*gcs_));
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(http::RenderMetricsPage(views_, jobs_, *gcs_, metrics_),
                      "text/plain; version=0.0.4; charset=utf-8");
    });
  }

 private:
  const HttpServerOptions options_;
  GcsClient* const gcs_;
  jobs::JobService jobs_;
  http::HttpMetrics metrics_;
  http::StateViews views_;
  http::NodeViews node_views_;
  http::TaskViews tasks_;
  http::Dashboard dashboard_;
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
  if (options_.tls_dir.empty()) {
    http_ = std::make_unique<httplib::Server>();
  } else {
    auto https = std::make_unique<httplib::SSLServer>(NodeCertPath(options_.tls_dir).c_str(),
                                                      NodeKeyPath(options_.tls_dir).c_str());
    if (!https->is_valid()) {
      Shutdown();
      return absl::FailedPreconditionError(
          absl::StrCat("cannot serve HTTPS with ", NodeCertPath(options_.tls_dir), " and its key"));
    }
    http_ = std::move(https);
  }
  routes_ = std::make_unique<Routes>(options_, gcs_.get());
  routes_->Install(*http_);
  if (!http_->bind_to_port(options_.bind.c_str(), options_.port)) {
    Shutdown();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.bind, ":",
                                               options_.port, " (in use? pick --http-port)"));
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
    } else if (absl::Now() - last_answer > options_.gcs_lost_timeout) {
      gcs_lost_ = true;
      http_->stop();
      return;
    }
  }
}

absl::Status HttpServer::Serve() {
  http_->listen_after_bind();
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

void HttpServer::Stop() { http_->stop(); }

}  // namespace troupe
