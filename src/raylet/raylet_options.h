// What a raylet is told at construction: where the cluster is, what the node offers, where its
// files go, and its timing knobs. This struct is the one place the raylet's defaults are
// declared: `troupe raylet` and `troupe start` (src/cli) take their flag defaults from it, and
// the embedded local cluster starts from it. Flag parsing lives in src/cli, not here.
// Value type.
#pragma once

#include <map>
#include <string>

#include "absl/time/time.h"
#include "src/common/ids.h"
#include "src/common/resources.h"

namespace troupe {

struct RayletOptions {
  std::string gcs_address;  // host:port of the head's GCS
  std::string token;        // cluster token text
  NodeId node_id = NodeId::FromRandom();
  std::string node_ip = "127.0.0.1";  // advertised to the cluster
  std::string bind_address = "127.0.0.1";
  int port = 0;           // 0: any free port
  // The object data port (src/raylet/object_data_server.h), on bind_address; 0: any free port.
  int object_data_port = 0;
  // Where Prometheus scrapes this node's user metrics (GET /metrics, token required), on
  // bind_address; 0: any free port (the node table shows the one taken); -1: not served.
  int metrics_port = 0;
  ResourceSet resources;  // totals this node offers
  std::map<std::string, std::string> labels;
  bool is_head = false;
  bool mask_gpus = false;            // --gpu-visibility=assigned
  std::string session_dir;           // logs go to <session_dir>/logs
  std::string object_store_dir;      // default: /dev/shm/troupe-<node id>
  std::string spill_dir;             // default: <session_dir>/spill
  std::string executable_cache_dir;  // default: <session_dir>/executables
  // This node's TLS files (src/tls/tls_files.h), passed on to workers; empty: no TLS. The
  // process's own servers and channels follow src/rpc/transport_security.h, set by main.
  std::string tls_dir;

  // How often the raylet reports its resources to the GCS (and gets the cluster view back),
  // reaps exited workers and checks memory. The embedded local cluster of a driver uses
  // kEmbeddedReportPeriod instead: one node, so reports are cheap and worker exits show sooner.
  static constexpr absl::Duration kDaemonReportPeriod = absl::Milliseconds(500);
  static constexpr absl::Duration kEmbeddedReportPeriod = absl::Milliseconds(100);
  absl::Duration report_period = kDaemonReportPeriod;
  // The raylet exits when the GCS has been unreachable (or refused to register it) this long.
  absl::Duration gcs_reconnect_timeout = absl::Seconds(60);
  // An idle worker is stopped after this long without a lease.
  absl::Duration worker_idle_timeout = absl::Seconds(60);
  // At most this many worker processes starting at once (WorkerPoolOptions::max_starting_workers);
  // 0: twice the machine's cores, at least 4.
  int max_starting_workers = 0;
  // Above this fraction of the machine's memory in use, the newest leased worker is killed
  // (its task retries, its actor restarts or dies with an out-of-memory cause). 1 disables it.
  double memory_usage_threshold = 0.95;
  // Testing only: read the memory usage (a fraction, e.g. "0.99") from this file instead of
  // /proc/meminfo, so tests drive the memory monitor. "" (default): the machine's real usage.
  std::string testing_memory_usage_file;
  // Node-to-node object transfer (src/raylet/object_transfer.h): streams per transfer and bytes
  // per chunk; 0: the defaults there. `troupe raylet` reads them from $TROUPE_OBJECT_STREAMS and
  // $TROUPE_OBJECT_CHUNK_BYTES (tuning knobs for benchmarks).
  int object_transfer_streams = 0;
  int64_t object_chunk_bytes = 0;
  // Pull ranges over other raylets' object data ports (else over gRPC only; the data port is
  // still served). `troupe raylet` reads $TROUPE_OBJECT_DATA_PORT_PULLS=0 (for A/B benchmarks).
  bool object_data_port_pulls = true;
  // Testing only: the raylet serves each object chunk this much later, so a test can kill a
  // source mid-transfer ($TROUPE_TESTING_OBJECT_SERVE_DELAY_MS for `troupe raylet`).
  absl::Duration testing_object_serve_chunk_delay = absl::ZeroDuration();
};

}  // namespace troupe
