// The head's HTTP server (`troupe http-server`, started by `troupe start --head` on --http-port,
// default 8265): the jobs REST API shaped like Ray's (/api/version, /api/jobs/..., /api/packages/
// ...), JSON state endpoints (/api/v0/{nodes,actors,placement_groups,jobs}, /api/cluster_status)
// and Prometheus /metrics. Every request needs `Authorization: Bearer <cluster token>` except
// /api/version; requests a browser makes from another site (an Origin or Sec-Fetch-Site that is
// not this server) are refused on every method; JSON bodies are capped at 1 MiB and package
// uploads at 100 MiB. See docs/jobs.md.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace troupe {

struct HttpServerOptions {
  std::string bind = "127.0.0.1";
  int port = 8265;
  std::string gcs_address;
  std::string token;  // the cluster token text
};

// Serves until SIGTERM/SIGINT. Fails if the port is taken or the GCS cannot be reached.
absl::Status RunHttpServer(const HttpServerOptions& options);

// `troupe http-server` (the daemon's entry point).
int HttpServerMain(const std::vector<std::string>& args);

}  // namespace troupe
