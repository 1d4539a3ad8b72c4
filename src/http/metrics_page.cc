#include "src/http/metrics_page.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "proto/schema.pb.h"
#include "src/jobs/job_record.h"
#include "src/schema/kv_schema.h"

namespace troupe::http {
namespace {

// A sample value: integers exactly, others with full precision.
std::string Num(double value) { return absl::StrFormat("%.17g", value); }

std::string Label(const std::string& value) { return EscapeLabelValue(value); }

void Gauge(std::string* out, const std::string& name, const std::string& help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n");
}

void RenderNodes(const jobs::Reply& nodes, std::string* out) {
  int alive = 0, dead = 0;
  if (nodes.status == 200) {
    for (const auto& n : nodes.body) (n["state"] == "ALIVE" ? alive : dead)++;
  }
  Gauge(out, "troupe_nodes", "Nodes by state.");
  absl::StrAppend(out, "troupe_nodes{state=\"alive\"} ", alive, "\ntroupe_nodes{state=\"dead\"} ",
                  dead, "\n");
  Gauge(out, "troupe_node_resource_capacity", "Resources an alive node offers.");
  std::string available_lines, store_used, store_spilled;
  if (nodes.status == 200) {
    for (const auto& n : nodes.body) {
      if (n["state"] != "ALIVE") continue;
      const std::string node = n["node_id"];
      for (const auto& [k, v] : n["resources_total"].items()) {
        absl::StrAppend(out, "troupe_node_resource_capacity{node_id=\"", node, "\",resource=\"",
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
  }
  Gauge(out, "troupe_node_resource_available", "Resources of an alive node not in use.");
  *out += available_lines;
  Gauge(out, "troupe_object_store_used_bytes", "Bytes of objects in a node's shared memory.");
  *out += store_used;
  Gauge(out, "troupe_object_store_spilled_bytes", "Bytes of objects a node spilled to disk.");
  *out += store_spilled;
}

// Counts of `field` over a 200 reply's array; `states` start at 0.
void RenderStates(const jobs::Reply& reply, const char* field, std::map<std::string, int> states,
                  const std::string& metric, const std::string& label, const std::string& help,
                  std::string* out) {
  if (reply.status == 200) {
    for (const auto& item : reply.body) ++states[item.value(field, "")];
  }
  Gauge(out, metric, help);
  for (const auto& [state, n] : states) {
    absl::StrAppend(out, metric, "{", label, "=\"", Label(state), "\"} ", n, "\n");
  }
}

}  // namespace

std::string RenderTaskCounters(const std::vector<std::string>& values) {
  rpc::TaskCounters sum;
  for (const auto& value : values) {
    rpc::TaskCounters one;
    if (!one.ParseFromString(value)) continue;
    sum.set_tasks_submitted(sum.tasks_submitted() + one.tasks_submitted());
    sum.set_tasks_finished(sum.tasks_finished() + one.tasks_finished());
    sum.set_tasks_failed(sum.tasks_failed() + one.tasks_failed());
    sum.set_tasks_retried(sum.tasks_retried() + one.tasks_retried());
    sum.set_tasks_reconstructed(sum.tasks_reconstructed() + one.tasks_reconstructed());
    sum.set_actor_calls_submitted(sum.actor_calls_submitted() + one.actor_calls_submitted());
    sum.set_actor_calls_finished(sum.actor_calls_finished() + one.actor_calls_finished());
    sum.set_actor_calls_failed(sum.actor_calls_failed() + one.actor_calls_failed());
  }
  std::string out = absl::StrCat(
      "# HELP troupe_tasks_total Tasks (not actor calls) by what happened to them: submitted "
      "(first attempts), finished, failed, retried, reconstructed (re-run to rebuild a lost "
      "object).\n"
      "# TYPE troupe_tasks_total counter\n",
      "troupe_tasks_total{state=\"submitted\"} ", sum.tasks_submitted(), "\n",
      "troupe_tasks_total{state=\"finished\"} ", sum.tasks_finished(), "\n",
      "troupe_tasks_total{state=\"failed\"} ", sum.tasks_failed(), "\n",
      "troupe_tasks_total{state=\"retried\"} ", sum.tasks_retried(), "\n",
      "troupe_tasks_total{state=\"reconstructed\"} ", sum.tasks_reconstructed(), "\n");
  absl::StrAppend(&out, "# HELP troupe_actor_calls_total Actor method calls by outcome.\n",
                  "# TYPE troupe_actor_calls_total counter\n",
                  "troupe_actor_calls_total{state=\"submitted\"} ", sum.actor_calls_submitted(),
                  "\n", "troupe_actor_calls_total{state=\"finished\"} ", sum.actor_calls_finished(),
                  "\n", "troupe_actor_calls_total{state=\"failed\"} ", sum.actor_calls_failed(),
                  "\n");
  return out;
}

std::string RenderMetricsPage(StateViews& views, jobs::JobService& jobs, GcsClient& gcs,
                              HttpMetrics& metrics) {
  std::string out;
  RenderNodes(views.Nodes(), &out);
  RenderStates(views.Actors(), "state",
               {{"PENDING_CREATION", 0}, {"ALIVE", 0}, {"RESTARTING", 0}, {"DEAD", 0}},
               "troupe_actors", "state", "Actors by state.", &out);
  RenderStates(views.PlacementGroups(), "state", {}, "troupe_placement_groups", "state",
               "Placement groups by state.", &out);

  // Tasks, summed over the counters every submitting process reports (src/core_worker).
  std::vector<std::string> counters;
  auto keys = metrics.Timed("KVKeys", [&] { return gcs.KVKeys(kTaskCountersNamespace, ""); });
  if (keys.ok()) {
    for (const auto& key : *keys) {
      auto value = gcs.KVGet(kTaskCountersNamespace, key);
      if (value.ok() && value->has_value()) counters.push_back(**value);
    }
  }
  out += RenderTaskCounters(counters);

  std::map<std::string, int> job_states;
  for (const char* s :
       {jobs::kPending, jobs::kRunning, jobs::kStopped, jobs::kSucceeded, jobs::kFailed}) {
    job_states[s] = 0;
  }
  RenderStates(jobs.List(), "status", job_states, "troupe_jobs", "status",
               "Submitted jobs by status.", &out);
  metrics.Render(&out);
  // The GCS's own handler latencies, as it last published them (every 5 s).
  if (auto gcs_latencies = gcs.KVGet(kMetricsNamespace, kGcsRpcLatencyKey);
      gcs_latencies.ok() && gcs_latencies->has_value()) {
    out += **gcs_latencies;
  }
  return out;
}

}  // namespace troupe::http
