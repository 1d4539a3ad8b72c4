#include "src/raylet/metrics_http_server.h"

#include <sys/socket.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "src/common/constant_time.h"

namespace troupe {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    MetricsHttpServerOptions options, std::function<std::string()> render) {
  const bool tls = !options.cert_path.empty();
  std::unique_ptr<httplib::Server> server;
  if (tls) {
    auto ssl =
        std::make_unique<httplib::SSLServer>(options.cert_path.c_str(), options.key_path.c_str());
    if (!ssl->is_valid()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the metrics port cannot serve HTTPS: ", options.cert_path, " or ",
                       options.key_path, " does not load"));
    }
    server = std::move(ssl);
  } else {
    server = std::make_unique<httplib::Server>();
  }
  server->new_task_queue = [] { return new httplib::ThreadPool(2); };
  server->set_read_timeout(10, 0);
  server->set_write_timeout(10, 0);
  server->set_payload_max_length(64 << 10);
  // httplib's default also sets SO_REUSEPORT, which would let a second server share a taken port
  // silently: only SO_REUSEADDR (a restarted raylet can take its port back at once).
  server->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  const std::string expected = "Bearer " + options.token;
  server->Get("/metrics", [expected, render = std::move(render)](const httplib::Request& request,
                                                                 httplib::Response& response) {
    if (!ConstantTimeEquals(request.get_header_value("Authorization"), expected)) {
      response.status = 401;
      response.set_content(
          "no or wrong token: send the cluster token as 'Authorization: Bearer <token>' (it is "
          "in <session dir>/token on the head; Prometheus: authorization.credentials_file)\n",
          "text/plain");
      return;
    }
    response.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  int port = options.port;
  if (port == 0) {
    port = server->bind_to_any_port(options.bind_address.c_str());
  } else if (!server->bind_to_port(options.bind_address.c_str(), port)) {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.bind_address, ":", options.port,
                     " for /metrics (taken?): pick another --metrics-port"));
  }
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(server), port, tls));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<httplib::Server> server, int port, bool tls)
    : server_(std::move(server)), port_(port), tls_(tls) {
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_returned_ = true;
  });
}

MetricsHttpServer::~MetricsHttpServer() {
  // httplib's stop() does nothing before the loop runs: wait for it (or for its failure).
  while (!server_->is_running() && !listen_returned_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace troupe
