// NodeViews: the state endpoints whose data lives on the raylets, not the GCS — /api/v0/objects,
// /api/v0/workers, /api/v0/logs and /api/v0/logs/file. Each request reads the GCS node table
// and asks every alive node's raylet (in parallel, kPerNodeTimeout each); a node that does not
// answer is reported in the reply's "unreachable_nodes" instead of failing the request.
// Thread-safe (each request makes its own raylet clients); the GCS client and metrics are
// borrowed and outlive it.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "src/http/http_metrics.h"
#include "src/jobs/job_service.h"
#include "src/rpc/gcs_client.h"

namespace troupe::http {

class NodeViews {
 public:
  static constexpr absl::Duration kPerNodeTimeout = absl::Seconds(3);

  NodeViews(GcsClient* gcs, std::string token, HttpMetrics* metrics)
      : gcs_(gcs), token_(std::move(token)), metrics_(metrics) {}

  // {"result": [object...], "unreachable_nodes": [...]}: one row per copy of an object (node,
  // size, owner, PRIMARY/SECONDARY, spilled, sealed, pins and who holds them).
  jobs::Reply Objects();
  // {"result": [worker...], "unreachable_nodes": [...]}: every worker process with its node,
  // pid, state (STARTING, IDLE, LEASED, or ACTOR when it holds a live actor), job, actor, log file.
  jobs::Reply Workers();
  // {"nodes": [{node_id, node_ip, is_head, files: [{name, size, mtime_ms}]}],
  //  "unreachable_nodes": [...]}; `node_id` (hex or a prefix; "" for all) picks nodes.
  jobs::Reply LogFiles(const std::string& node_id);
  // One file of one node's logs directory: {node_id, filename, data, offset, next_offset, size}.
  // `node_id` "" means the head node. `lines` > 0: the last lines; else from `offset`.
  jobs::Reply LogFile(const std::string& node_id, const std::string& filename, int lines,
                      int64_t offset, int64_t max_bytes);

 private:
  GcsClient* const gcs_;
  const std::string token_;
  HttpMetrics* const metrics_;
};

}  // namespace troupe::http
