// StateViews: the JSON state endpoints (/api/v0/nodes, /api/v0/actors,
// /api/v0/placement_groups, /api/v0/jobs, /api/cluster_status, /api/v0/prometheus_targets), read
// from the GCS on each request (timed into HttpMetrics), and the removal of a placement group
// (`troupe remove`). Rows of jobs and actors carry "is_system" (see IsSystemActor). /metrics
// renders from the same views. Thread-safe; the GCS client, job service and metrics are borrowed
// and outlive it.
#pragma once

#include <vector>

#include "nlohmann/json.hpp"
#include "proto/common.pb.h"
#include "src/http/http_metrics.h"
#include "src/jobs/job_service.h"
#include "src/rpc/gcs_client.h"

namespace troupe::http {

// Troupe's own machinery, hidden from user views unless asked for (`--all`) and marked
// "is_system": true in the API: jobs and actors in a namespace starting with "troupe_" (the head's
// HTTP server runs as a driver in kSupervisorNamespace; job supervisors are created there) and
// actors whose class is in the troupe:: C++ namespace.
bool IsSystemActor(const rpc::ActorInfo& actor);
bool IsSystemJob(const rpc::JobInfo& job);

// Prometheus' HTTP service discovery (http_sd_configs) for the alive nodes that serve /metrics:
// one group per node, {"targets": ["<ip>:<metrics port>"], "labels": {"node_id", "node_ip",
// "is_head", and "__scheme__": "https" when the node serves TLS}}.
nlohmann::json PrometheusTargets(const std::vector<rpc::NodeInfo>& nodes);

class StateViews {
 public:
  StateViews(GcsClient* gcs, jobs::JobService* jobs, HttpMetrics* metrics)
      : gcs_(gcs), jobs_(jobs), metrics_(metrics) {}

  // Each: 200 and a JSON array (ClusterStatus: an object), or 503 when the GCS cannot answer.
  jobs::Reply Nodes();
  jobs::Reply Actors();
  jobs::Reply PlacementGroups();
  // Removes the placement group named by `key`: its full ID (hex), its name, or a prefix of its
  // ID that only one live group has (or, with no live one, one removed group: already removed). 200
  // {"placement_group_id", "name", "removed": true, "already_removed"}; 404 when none matches; 400
  // when the prefix is ambiguous; 503 when the GCS cannot answer.
  jobs::Reply RemovePlacementGroup(const std::string& key);
  // Drivers (from the GCS job table) followed by submitted jobs (their records).
  jobs::Reply Jobs();
  // Alive/dead node counts and summed total/available resources.
  jobs::Reply ClusterStatus();
  // PrometheusTargets of the GCS's node table.
  jobs::Reply PrometheusTargets();

 private:
  GcsClient* const gcs_;
  jobs::JobService* const jobs_;
  HttpMetrics* const metrics_;
};

}  // namespace troupe::http
