// StateViews: the JSON state endpoints (/api/v0/nodes, /api/v0/actors,
// /api/v0/placement_groups, /api/v0/jobs, /api/cluster_status), read from the GCS on each request
// (timed into HttpMetrics). /metrics renders from the same views. Thread-safe; the GCS client,
// job service and metrics are borrowed and outlive it.
#pragma once

#include "src/http/http_metrics.h"
#include "src/jobs/job_service.h"
#include "src/rpc/gcs_client.h"

namespace troupe::http {

class StateViews {
 public:
  StateViews(GcsClient* gcs, jobs::JobService* jobs, HttpMetrics* metrics)
      : gcs_(gcs), jobs_(jobs), metrics_(metrics) {}

  // Each: 200 and a JSON array (ClusterStatus: an object), or 503 when the GCS cannot answer.
  jobs::Reply Nodes();
  jobs::Reply Actors();
  jobs::Reply PlacementGroups();
  // Drivers (from the GCS job table) followed by submitted jobs (their records).
  jobs::Reply Jobs();
  // Alive/dead node counts and summed total/available resources.
  jobs::Reply ClusterStatus();

 private:
  GcsClient* const gcs_;
  jobs::JobService* const jobs_;
  HttpMetrics* const metrics_;
};

}  // namespace troupe::http
