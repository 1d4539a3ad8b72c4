// The Prometheus /metrics page of the head: cluster gauges (nodes, resources, object stores,
// actors, placement groups, submitted jobs) from the state views, task and actor-call totals
// summed over the rpc::TaskCounters every submitting process reports in the GCS KV
// (src/schema/kv_schema.h), this server's request metrics, and the GCS's own RPC latencies as it
// last published them. Rendered per request; thread-safe as its inputs are.
#pragma once

#include <string>
#include <vector>

#include "src/http/http_metrics.h"
#include "src/http/state_views.h"
#include "src/jobs/job_service.h"
#include "src/rpc/gcs_client.h"

namespace troupe::http {

std::string RenderMetricsPage(StateViews& views, jobs::JobService& jobs, GcsClient& gcs,
                              HttpMetrics& metrics);

// troupe_tasks_total and troupe_actor_calls_total from serialized rpc::TaskCounters values (one
// per process); values that do not parse are skipped.
std::string RenderTaskCounters(const std::vector<std::string>& values);

}  // namespace troupe::http
