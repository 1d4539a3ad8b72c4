#include "src/http/http_server.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "proto/gcs.pb.h"
#include "src/common/flag_parser.h"
#include "src/common/ids.h"
#include "src/common/package.h"
#include "src/core_worker/core_worker.h"
#include "src/gcs/gcs_server.h"
#include "src/jobs/job_record.h"
#include "src/jobs/job_service.h"
#include "src/rpc/gcs_client.h"
#include "src/rpc/rpc_latency.h"
#include "troupe/api.h"

namespace troupe {
namespace {

using nlohmann::json;

constexpr size_t kMaxJsonBody = 1 << 20;
constexpr char kVersion[] = "0.1.0";
// A sample value: integers exactly, others with full precision.
std::string Num(double value) { return absl::StrFormat("%.17g", value); }

// Request counts and latencies, for /metrics.
class HttpMetrics {
 public:
  void Observe(const std::string& route, int status, double seconds) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++requests_[{route, status}];
    }
    latency_.Observe(route, seconds);
  }
  void ObserveGcs(const std::string& method, double seconds) {
    gcs_latency_.Observe(method, seconds);
  }
  void Render(std::string* out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
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

 private:
  std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  RpcLatencies latency_{"route"}, gcs_latency_{"method"};
};

// Times a GCS call for the metrics.
template <typename F>
auto Timed(HttpMetrics& metrics, const char* method, F call) {
  const auto start = std::chrono::steady_clock::now();
  auto result = call();
  metrics.ObserveGcs(
      method, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return result;
}

json MapToJson(const google::protobuf::Map<std::string, double>& map) {
  json out = json::object();
  for (const auto& [k, v] : map) out[k] = v;
  return out;
}

// Prometheus label values: escape backslash, quote and newline.
std::string Label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? 'n' : c;
  }
  return out;
}

class Server {
 public:
  Server(const HttpServerOptions& options, GcsClient* gcs)
      : options_(options), gcs_(gcs), jobs_(gcs) {}

  void Install(httplib::Server& http) {
    http.set_payload_max_length(kMaxPackageBytes + (1 << 20));
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      return Admit(req, res) ? httplib::Server::HandlerResponse::Unhandled
                             : httplib::Server::HandlerResponse::Handled;
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - StartOf(req)).count();
      metrics_.Observe(Route(req), res.status, seconds);
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
    http.Get(
        R"(/api/jobs/([^/]+)/logs/tail/?)",
        [this](const httplib::Request& req, httplib::Response& res) { Tail(req.matches[1], res); });
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
    http.Get("/api/v0/nodes",
             [this](const httplib::Request&, httplib::Response& res) { Send(res, Nodes()); });
    http.Get("/api/v0/actors",
             [this](const httplib::Request&, httplib::Response& res) { Send(res, Actors()); });
    http.Get("/api/v0/placement_groups",
             [this](const httplib::Request&, httplib::Response& res) { Send(res, Groups()); });
    http.Get("/api/v0/jobs",
             [this](const httplib::Request&, httplib::Response& res) { Send(res, Drivers()); });
    http.Get("/api/cluster_status", [this](const httplib::Request&, httplib::Response& res) {
      Send(res, ClusterStatus());
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(Metrics(), "text/plain; version=0.0.4; charset=utf-8");
    });
  }

 private:
  static void Send(httplib::Response& res, const jobs::Reply& reply) {
    res.status = reply.status;
    res.set_content(reply.body.dump(), "application/json");
  }

  static std::chrono::steady_clock::time_point StartOf(const httplib::Request& req) {
    auto it = req.headers.find("X-Troupe-Start");
    if (it == req.headers.end()) return std::chrono::steady_clock::now();
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(std::stoll(it->second)));
  }

  // The route for metrics labels: the path with job ids and package names replaced.
  static std::string Route(const httplib::Request& req) {
    std::string path = req.path;
    if (path.rfind("/api/jobs/", 0) == 0 && path.size() > 10) {
      const size_t end = path.find('/', 10);
      path = "/api/jobs/{id}" + (end == std::string::npos ? "" : path.substr(end));
    } else if (path.rfind("/api/packages/", 0) == 0) {
      path = "/api/packages/{name}";
    }
    return req.method + " " + path;
  }

  // Authentication and the cross-site check, before any handler runs.
  bool Admit(const httplib::Request& req, httplib::Response& res) {
    const_cast<httplib::Request&>(req).headers.emplace(
        "X-Troupe-Start",
        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    // A browser on another site must never drive this API (code execution): refuse any request
    // whose Origin is not this server, or that the browser marks cross-site, whatever the method.
    const std::string host = req.get_header_value("Host");
    const std::string origin = req.get_header_value("Origin");
    const std::string fetch_site = req.get_header_value("Sec-Fetch-Site");
    if ((!origin.empty() && origin != "http://" + host) || fetch_site == "cross-site") {
      Send(res, jobs::Error(403, "cross-origin request refused (Origin: " + origin +
                                     "): the jobs API only answers same-origin browser "
                                     "requests and non-browser clients"));
      return false;
    }
    if (req.path == "/api/version") return true;
    const std::string auth = req.get_header_value("Authorization");
    if (auth != "Bearer " + options_.token) {
      Send(res, jobs::Error(401, std::string(auth.empty() ? "no token" : "wrong token") +
                                     ": send the cluster token as 'Authorization: Bearer <token>' "
                                     "(it is in <session dir>/token on the head, mode 0600; the "
                                     "troupe CLI sends it for you)"));
      return false;
    }
    return true;
  }

  static bool JsonBody(const httplib::Request& req, httplib::Response& res) {
    if (req.body.size() > kMaxJsonBody) {
      Send(res, jobs::Error(413, absl::StrCat("the body is ", req.body.size(),
                                              " bytes; JSON requests are limited to ", kMaxJsonBody,
                                              " bytes")));
      return false;
    }
    return true;
  }

  // Streams the job's output as it grows, until the job has ended and everything was sent.
  void Tail(const std::string& id, httplib::Response& res) {
    if (!jobs_.Record(id))
      return Send(res, jobs::Error(404, "no job with submission_id '" + id + "'"));
    auto sent = std::make_shared<size_t>(0);
    res.set_chunked_content_provider(
        "text/plain", [this, id, sent](size_t, httplib::DataSink& sink) {
          for (int i = 0; i < 100; ++i) {  // poll for up to 30 s per chunk request
            auto record = jobs_.Record(id);
            const std::string logs = jobs_.LogText(id);
            if (logs.size() > *sent) {
              sink.write(logs.data() + *sent, logs.size() - *sent);
              *sent = logs.size();
              return true;
            }
            if (!record || jobs::IsTerminal(record->value("status", ""))) {
              sink.done();
              return true;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
          }
          return true;
        });
  }

  jobs::Reply Nodes() {
    auto nodes = Timed(metrics_, "GetAllNodeInfo", [&] { return gcs_->GetAllNodeInfo(); });
    auto usage =
        Timed(metrics_, "GetAllResourceUsage", [&] { return gcs_->GetAllResourceUsage(); });
    if (!nodes.ok()) return jobs::Error(503, std::string(nodes.status().message()));
    std::map<std::string, rpc::ResourceUsage> by_node;
    if (usage.ok()) {
      for (auto& u : *usage) by_node[u.node_id()] = u;
    }
    json out = json::array();
    for (const auto& node : *nodes) {
      json entry = {{"node_id", BytesToHex(node.node_id())},
                    {"node_ip", node.node_ip()},
                    {"state", node.state() == rpc::NodeInfo::ALIVE ? "ALIVE" : "DEAD"},
                    {"is_head_node", node.is_head()},
                    {"resources_total", MapToJson(node.resources_total())},
                    {"death_reason", node.death_reason()}};
      json labels = json::object();
      for (const auto& [k, v] : node.labels()) labels[k] = v;
      entry["labels"] = labels;
      if (auto it = by_node.find(node.node_id()); it != by_node.end()) {
        entry["resources_available"] = MapToJson(it->second.available());
        entry["object_store_used_bytes"] = it->second.object_store_used_bytes();
        entry["object_store_spilled_bytes"] = it->second.object_store_spilled_bytes();
      }
      out.push_back(entry);
    }
    return {200, out};
  }

  jobs::Reply Actors() {
    auto actors = Timed(metrics_, "GetAllActorInfo", [&] { return gcs_->GetAllActorInfo(); });
    if (!actors.ok()) return jobs::Error(503, std::string(actors.status().message()));
    json out = json::array();
    for (const auto& a : *actors) {
      out.push_back({{"actor_id", BytesToHex(a.actor_id())},
                     {"class_name", a.class_name()},
                     {"name", a.name()},
                     {"namespace", a.namespace_name()},
                     {"state", rpc::ActorInfo::State_Name(a.state())},
                     {"node_id", BytesToHex(a.node_id())},
                     {"pid", a.pid()},
                     {"worker_id", BytesToHex(a.worker_id())},
                     {"num_restarts", a.num_restarts()},
                     {"job_id", BytesToHex(a.job_id())},
                     {"detached", a.detached()},
                     {"required_resources", MapToJson(a.required_resources())},
                     {"death_cause", a.death_cause()}});
    }
    return {200, out};
  }

  jobs::Reply Groups() {
    auto groups =
        Timed(metrics_, "GetAllPlacementGroups", [&] { return gcs_->GetAllPlacementGroups(); });
    if (!groups.ok()) return jobs::Error(503, std::string(groups.status().message()));
    json out = json::array();
    for (const auto& g : *groups) {
      json bundles = json::array();
      for (const auto& b : g.bundles()) bundles.push_back(MapToJson(b.resources()));
      out.push_back({{"placement_group_id", BytesToHex(g.placement_group_id())},
                     {"name", g.name()},
                     {"state", rpc::PlacementGroupInfo::State_Name(g.state())},
                     {"strategy", rpc::PlacementGroupInfo::Strategy_Name(g.strategy())},
                     {"bundles", bundles},
                     {"pending_reason", g.pending_reason()}});
    }
    return {200, out};
  }

  jobs::Reply Drivers() {
    auto drivers = Timed(metrics_, "GetAllJobInfo", [&] { return gcs_->GetAllJobInfo(); });
    if (!drivers.ok()) return jobs::Error(503, std::string(drivers.status().message()));
    json out = json::array();
    for (const auto& j : *drivers) {
      out.push_back({{"job_id", BytesToHex(j.job_id())},
                     {"type", "DRIVER"},
                     {"status", j.state() == rpc::JobInfo::RUNNING ? "RUNNING" : "FINISHED"},
                     {"entrypoint", j.entrypoint()},
                     {"start_time", j.start_time_ms()},
                     {"end_time", j.end_time_ms()},
                     {"driver_pid", j.driver_pid()}});
    }
    auto submitted = jobs_.List();
    if (submitted.status == 200) {
      for (auto& s : submitted.body) out.push_back(s);
    }
    return {200, out};
  }

  jobs::Reply ClusterStatus() {
    auto nodes = Nodes();
    if (nodes.status != 200) return nodes;
    json total = json::object(), available = json::object();
    int alive = 0, dead = 0;
    for (const auto& node : nodes.body) {
      if (node["state"] != "ALIVE") {
        ++dead;
        continue;
      }
      ++alive;
      for (const auto& [k, v] : node["resources_total"].items())
        total[k] = total.value(k, 0.0) + v.get<double>();
      if (node.contains("resources_available")) {
        for (const auto& [k, v] : node["resources_available"].items()) {
          available[k] = available.value(k, 0.0) + v.get<double>();
        }
      }
    }
    return {200, json{{"alive_nodes", alive},
                      {"dead_nodes", dead},
                      {"resources_total", total},
                      {"resources_available", available}}};
  }

  std::string Metrics() {
    std::string out;
    auto gauge = [&](const std::string& name, const std::string& help) {
      absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n");
    };
    auto nodes = Nodes();
    int alive = 0, dead = 0;
    if (nodes.status == 200) {
      for (const auto& n : nodes.body) (n["state"] == "ALIVE" ? alive : dead)++;
    }
    gauge("troupe_nodes", "Nodes by state.");
    absl::StrAppend(&out, "troupe_nodes{state=\"alive\"} ", alive,
                    "\ntroupe_nodes{state=\"dead\"} ", dead, "\n");
    gauge("troupe_node_resource_capacity", "Resources an alive node offers.");
    std::string available_lines, store_used, store_spilled;
    for (const auto& n : nodes.body) {
      if (n["state"] != "ALIVE") continue;
      const std::string node = n["node_id"];
      for (const auto& [k, v] : n["resources_total"].items()) {
        absl::StrAppend(&out, "troupe_node_resource_capacity{node_id=\"", node, "\",resource=\"",
                        Label(k), "\"} ", Num(v.get<double>()), "\n");
      }
      if (!n.contains("resources_available")) continue;
      for (const auto& [k, v] : n["resources_available"].items()) {
        absl::StrAppend(&available_lines, "troupe_node_resource_available{node_id=\"", node,
                        "\",resource=\"", Label(k), "\"} ", Num(v.get<double>()), "\n");
      }
      absl::StrAppend(&store_used, "troupe_object_store_used_bytes{node_id=\"", node, "\"} ",
                      n["object_store_used_bytes"].get<int64_t>(), "\n");
      absl::StrAppend(&store_spilled, "troupe_object_store_spilled_bytes{node_id=\"", node, "\"} ",
                      n["object_store_spilled_bytes"].get<int64_t>(), "\n");
    }
    gauge("troupe_node_resource_available", "Resources of an alive node not in use.");
    out += available_lines;
    gauge("troupe_object_store_used_bytes", "Bytes of objects in a node's shared memory.");
    out += store_used;
    gauge("troupe_object_store_spilled_bytes", "Bytes of objects a node spilled to disk.");
    out += store_spilled;

    std::map<std::string, int> actor_states;
    for (const char* s : {"PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD"}) actor_states[s] = 0;
    if (auto actors = Actors(); actors.status == 200) {
      for (const auto& a : actors.body) ++actor_states[a["state"].get<std::string>()];
    }
    gauge("troupe_actors", "Actors by state.");
    for (const auto& [state, n] : actor_states) {
      absl::StrAppend(&out, "troupe_actors{state=\"", state, "\"} ", n, "\n");
    }
    std::map<std::string, int> group_states;
    if (auto groups = Groups(); groups.status == 200) {
      for (const auto& g : groups.body) ++group_states[g["state"].get<std::string>()];
    }
    gauge("troupe_placement_groups", "Placement groups by state.");
    for (const auto& [state, n] : group_states) {
      absl::StrAppend(&out, "troupe_placement_groups{state=\"", state, "\"} ", n, "\n");
    }
    std::map<std::string, int> job_states;
    for (const char* s :
         {jobs::kPending, jobs::kRunning, jobs::kStopped, jobs::kSucceeded, jobs::kFailed}) {
      job_states[s] = 0;
    }
    if (auto submitted = jobs_.List(); submitted.status == 200) {
      for (const auto& j : submitted.body) ++job_states[j.value("status", "")];
    }
    // Tasks, summed over the counters every submitting process reports (src/core_worker).
    int64_t tasks[7] = {0, 0, 0, 0, 0, 0, 0};
    auto keys = Timed(metrics_, "KVKeys", [&] { return gcs_->KVKeys(kTaskCountersNamespace, ""); });
    if (keys.ok()) {
      for (const auto& key : *keys) {
        auto value = gcs_->KVGet(kTaskCountersNamespace, key);
        if (!value.ok() || !value->has_value()) continue;
        std::vector<std::string> fields = absl::StrSplit(**value, ' ');
        for (size_t i = 0; i < 7 && i < fields.size(); ++i) {
          int64_t n = 0;
          if (absl::SimpleAtoi(fields[i], &n)) tasks[i] += n;
        }
      }
    }
    absl::StrAppend(&out,
                    "# HELP troupe_tasks_total Tasks (not actor calls) by what happened to "
                    "them: submitted (first attempts), finished, failed, retried.\n"
                    "# TYPE troupe_tasks_total counter\n");
    const char* kTaskStates[] = {"submitted", "finished", "failed", "retried"};
    for (int i = 0; i < 4; ++i) {
      absl::StrAppend(&out, "troupe_tasks_total{state=\"", kTaskStates[i], "\"} ", tasks[i], "\n");
    }
    absl::StrAppend(&out, "# HELP troupe_actor_calls_total Actor method calls by outcome.\n",
                    "# TYPE troupe_actor_calls_total counter\n");
    for (int i = 0; i < 3; ++i) {
      absl::StrAppend(&out, "troupe_actor_calls_total{state=\"", kTaskStates[i], "\"} ",
                      tasks[4 + i], "\n");
    }
    gauge("troupe_jobs", "Submitted jobs by status.");
    for (const auto& [state, n] : job_states) {
      absl::StrAppend(&out, "troupe_jobs{status=\"", state, "\"} ", n, "\n");
    }
    metrics_.Render(&out);
    // The GCS's own handler latencies, as it last published them (every 5 s).
    if (auto gcs_latencies = gcs_->KVGet(kMetricsNamespace, kGcsRpcLatencyKey);
        gcs_latencies.ok() && gcs_latencies->has_value()) {
      out += **gcs_latencies;
    }
    return out;
  }

  HttpServerOptions options_;
  GcsClient* gcs_;
  jobs::JobService jobs_;
  HttpMetrics metrics_;
};

httplib::Server* running_server = nullptr;

}  // namespace

absl::Status RunHttpServer(const HttpServerOptions& options) {
  GcsClient gcs(options.gcs_address, options.token, absl::Seconds(5));
  if (auto info = gcs.GetClusterInfo(); !info.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot reach the GCS at ", options.gcs_address,
                                               ": ", info.status().message()));
  }
  // The server is a Troupe driver too: it starts job supervisors as actors.
  Config config;
  config.address = options.gcs_address;
  config.token = options.token;
  config.log_to_driver = false;
  try {
    Init(config);
  } catch (const TroupeError& e) {
    return absl::UnavailableError(std::string("cannot join the cluster: ") + e.what());
  }
  httplib::Server http;
  Server server(options, &gcs);
  server.Install(http);
  if (!http.bind_to_port(options.bind.c_str(), options.port)) {
    Shutdown();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.bind, ":", options.port,
                                               " (in use? pick --http-port)"));
  }
  running_server = &http;
  std::thread stopper([&http] {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    int signal = 0;
    sigwait(&signals, &signal);
    http.stop();
  });
  http.listen_after_bind();
  stopper.detach();
  Shutdown();
  return absl::OkStatus();
}

int HttpServerMain(const std::vector<std::string>& args) {
  HttpServerOptions options;
  std::string token_file;
  int64_t port = options.port;
  FlagParser flags("troupe http-server",
                   "Runs the head's HTTP server (jobs REST API, state, /metrics) in the "
                   "foreground. `troupe start --head` starts it for you.");
  flags.AddString("address", &options.gcs_address, "host:port of the GCS.");
  flags.AddString("token-file", &token_file, "File holding the cluster token.");
  flags.AddString("bind", &options.bind, "Address to listen on.");
  flags.AddInt("port", &port, "Port to listen on.");
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "troupe http-server: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  std::ifstream in(token_file);
  std::getline(in, options.token);
  if (options.token.empty()) {
    std::fprintf(stderr, "troupe http-server: no token in --token-file=%s\n", token_file.c_str());
    return 2;
  }
  options.port = static_cast<int>(port);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // the stopper thread waits for them
  absl::Status status = RunHttpServer(options);
  if (!status.ok()) {
    std::fprintf(stderr, "troupe http-server: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace troupe
