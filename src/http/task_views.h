// TaskViews: the task state API of the head's HTTP server, read from the GCS's task table
// (src/gcs/task_event_manager.h) on each request (timed into HttpMetrics):
//   GET /api/v0/tasks            ?filter=KEY=VALUE|KEY!=VALUE (repeated) &limit=N &detail=true
//   GET /api/v0/tasks/{task_id}  every attempt of one task
//   GET /api/v0/tasks/summarize  counts by function / actor method name and state
//   GET /api/v0/timeline         ?job_id=HEX: Chrome trace-event JSON (Perfetto, chrome://tracing)
// Shapes are documented in docs/cli.md ("Task state API"). Query parameters come in as a plain
// multimap, so no HTTP library type reaches this file. Thread-safe; the GCS client and metrics are
// borrowed and outlive it.
#pragma once

#include <map>
#include <string>

#include "src/http/http_metrics.h"
#include "src/jobs/job_service.h"
#include "src/rpc/gcs_client.h"

namespace troupe::http {

using QueryParams = std::multimap<std::string, std::string>;

// The parameters of a request target's query ("/path?a=1&filter=state=RUNNING"): split at '&',
// each at its FIRST '=', then percent-decoded ('+' is a space), so `filter=k=v` works unencoded
// as well as encoded (`filter=k%3Dv`). HTTP libraries split at the last '=' instead.
QueryParams ParseQuery(const std::string& target);

class TaskViews {
 public:
  // Rows a list answers without a `limit`; limit=0 answers every matching task (at most what
  // the GCS keeps: its --max-task-events, 100,000 by default).
  static constexpr int64_t kDefaultLimit = 100;

  TaskViews(GcsClient* gcs, HttpMetrics* metrics) : gcs_(gcs), metrics_(metrics) {}

  // {"result": [row...], "total": N, "num_after_truncation": M, "num_dropped": D}; 400 for a
  // bad filter or limit, 503 when the GCS cannot answer.
  jobs::Reply List(const QueryParams& params);
  // {"result": latest attempt (detailed), "attempts": [every attempt]}; 404 if unknown.
  jobs::Reply Get(const std::string& task_id_hex);
  // {"summary": {name: {"type": T, "state_counts": {STATE: n}}}, "total": N, "num_dropped": D}.
  jobs::Reply Summarize(const QueryParams& params);
  // {"traceEvents": [...]}: one "X" event per finished or failed run (pid: node, tid: worker),
  // plus process/thread name metadata.
  jobs::Reply Timeline(const QueryParams& params);

 private:
  // Filters (and job_id) from the query into a GCS request; an error message if malformed.
  static bool ParseFilters(const QueryParams& params, rpc::GetTaskEventsRequest* request,
                           std::string* error);
  absl::StatusOr<rpc::GetTaskEventsReply> Fetch(const rpc::GetTaskEventsRequest& request);

  GcsClient* const gcs_;
  HttpMetrics* const metrics_;
};

}  // namespace troupe::http
