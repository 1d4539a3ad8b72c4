#include "src/http/task_views.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "proto/gcs.pb.h"
#include "src/common/ids.h"

namespace troupe::http {
namespace {

using nlohmann::json;

int64_t StateTimeUs(const rpc::TaskRecord& task, rpc::TaskEvent::State state) {
  auto it = task.state_time_us().find(state);
  return it == task.state_time_us().end() ? 0 : it->second;
}

// When the run ended (finished or failed); 0 while it has not.
int64_t EndTimeUs(const rpc::TaskRecord& task) {
  return std::max(StateTimeUs(task, rpc::TaskEvent::FINISHED),
                  StateTimeUs(task, rpc::TaskEvent::FAILED));
}

json Row(const rpc::TaskRecord& task, bool detail) {
  json row = {{"task_id", BytesToHex(task.task_id())},
              {"attempt_number", task.attempt()},
              {"name", task.name()},
              {"state", rpc::TaskEvent::State_Name(task.state())},
              {"type", rpc::TaskSpec::Type_Name(task.type())},
              {"job_id", BytesToHex(task.job_id())},
              {"actor_id", BytesToHex(task.actor_id())},
              {"node_id", BytesToHex(task.node_id())},
              {"worker_id", BytesToHex(task.worker_id())},
              {"worker_pid", task.worker_pid()},
              {"error_message", task.error_message()}};
  if (!detail) return row;
  int64_t created_us = 0;
  json times = json::object();
  for (const auto& [state, time_us] : task.state_time_us()) {
    times[rpc::TaskEvent::State_Name(static_cast<rpc::TaskEvent::State>(state))] =
        time_us / 1000;
    if (created_us == 0 || time_us < created_us) created_us = time_us;
  }
  row["creation_time_ms"] = created_us / 1000;
  row["start_time_ms"] = StateTimeUs(task, rpc::TaskEvent::RUNNING) / 1000;
  row["end_time_ms"] = EndTimeUs(task) / 1000;
  row["state_times_ms"] = times;
  return row;
}

std::string PercentDecode(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    int high, low;
    auto hex = [](char c) {
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : -1;
    };
    if (text[i] == '%' && i + 2 < text.size() && (high = hex(text[i + 1])) >= 0 &&
        (low = hex(text[i + 2])) >= 0) {
      out.push_back(static_cast<char>(high * 16 + low));
      i += 2;
    } else {
      out.push_back(text[i] == '+' ? ' ' : text[i]);
    }
  }
  return out;
}

}  // namespace

QueryParams ParseQuery(const std::string& target) {
  QueryParams params;
  const size_t start = target.find('?');
  if (start == std::string::npos) return params;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(target).substr(start + 1), '&', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    const std::string key(part.substr(0, eq));
    const std::string value(eq == absl::string_view::npos ? "" : part.substr(eq + 1));
    params.emplace(PercentDecode(key), PercentDecode(value));
  }
  return params;
}

bool TaskViews::ParseFilters(const QueryParams& params, rpc::GetTaskEventsRequest* request,
                             std::string* error) {
  for (auto [it, end] = params.equal_range("filter"); it != end; ++it) {
    const std::string& text = it->second;
    rpc::TaskFilter* filter = request->add_filters();
    size_t at = text.find("!=");
    if (at != std::string::npos) {
      filter->set_not_equal(true);
      filter->set_value(text.substr(at + 2));
    } else if ((at = text.find('=')) != std::string::npos) {
      filter->set_value(text.substr(at + 1));
    } else {
      *error = absl::StrCat("filter '", text, "' must read KEY=VALUE or KEY!=VALUE");
      return false;
    }
    filter->set_key(text.substr(0, at));
  }
  if (auto it = params.find("job_id"); it != params.end()) {
    rpc::TaskFilter* filter = request->add_filters();
    filter->set_key("job_id");
    filter->set_value(it->second);
  }
  return true;
}

absl::StatusOr<rpc::GetTaskEventsReply> TaskViews::Fetch(const rpc::GetTaskEventsRequest& request) {
  return metrics_->Timed("GetTaskEvents", [&] { return gcs_->GetTaskEvents(request); });
}

namespace {
jobs::Reply FromStatus(const absl::Status& status) {
  return jobs::Error(status.code() == absl::StatusCode::kInvalidArgument ? 400 : 503,
                     std::string(status.message()));
}
}  // namespace

jobs::Reply TaskViews::List(const QueryParams& params) {
  rpc::GetTaskEventsRequest request;
  std::string error;
  if (!ParseFilters(params, &request, &error)) return jobs::Error(400, error);
  int64_t limit = kDefaultLimit;
  if (auto it = params.find("limit"); it != params.end()) {
    if (!absl::SimpleAtoi(it->second, &limit) || limit < 0) {
      return jobs::Error(400, absl::StrCat("limit must be a whole number, 0 for every task, got '",
                                           it->second, "'"));
    }
  }
  request.set_limit(limit);
  const auto detail_it = params.find("detail");
  const bool detail = detail_it != params.end() &&
                      (detail_it->second == "true" || detail_it->second == "1");
  auto reply = Fetch(request);
  if (!reply.ok()) return FromStatus(reply.status());
  json rows = json::array();
  for (const auto& task : reply->tasks()) rows.push_back(Row(task, detail));
  return {200,
          {{"result", rows},
           {"total", reply->total()},
           {"num_after_truncation", reply->tasks_size()},
           {"num_dropped", reply->num_dropped()}}};
}

jobs::Reply TaskViews::Get(const std::string& task_id_hex) {
  rpc::GetTaskEventsRequest request;
  rpc::TaskFilter* filter = request.add_filters();
  filter->set_key("task_id");
  filter->set_value(task_id_hex);
  auto reply = Fetch(request);
  if (!reply.ok()) return FromStatus(reply.status());
  if (reply->tasks_size() == 0) {
    return jobs::Error(404, absl::StrCat("no task ", task_id_hex,
                                         " is known (it may be older than the per-job cap)"));
  }
  json attempts = json::array();
  const rpc::TaskRecord* latest = &reply->tasks(0);
  for (const auto& task : reply->tasks()) {
    attempts.push_back(Row(task, /*detail=*/true));
    if (task.attempt() > latest->attempt()) latest = &task;
  }
  return {200, {{"result", Row(*latest, /*detail=*/true)}, {"attempts", attempts}}};
}

jobs::Reply TaskViews::Summarize(const QueryParams& params) {
  rpc::GetTaskEventsRequest request;
  std::string error;
  if (!ParseFilters(params, &request, &error)) return jobs::Error(400, error);
  auto reply = Fetch(request);
  if (!reply.ok()) return FromStatus(reply.status());
  json summary = json::object();
  int64_t retried = 0;  // attempts after the first (the dashboard charts retries from this)
  for (const auto& task : reply->tasks()) {
    if (task.attempt() > 0) ++retried;
    json& entry = summary[task.name()];
    if (entry.is_null()) {
      entry = {{"type", rpc::TaskSpec::Type_Name(task.type())},
               {"state_counts", json::object()}};
    }
    json& count = entry["state_counts"][rpc::TaskEvent::State_Name(task.state())];
    count = count.is_null() ? 1 : count.get<int64_t>() + 1;
  }
  return {200,
          {{"summary", summary},
           {"total", reply->total()},
           {"num_dropped", reply->num_dropped()},
           {"retried_attempts", retried}}};
}

jobs::Reply TaskViews::Timeline(const QueryParams& params) {
  rpc::GetTaskEventsRequest request;
  std::string error;
  if (!ParseFilters(params, &request, &error)) return jobs::Error(400, error);
  auto reply = Fetch(request);
  if (!reply.ok()) return FromStatus(reply.status());
  json events = json::array();
  std::map<std::string, int> node_pids;  // node (binary) -> trace pid, numbered 1, 2, ...
  std::map<std::pair<int, int>, std::string> threads;  // (pid, tid) -> worker ID
  for (const auto& task : reply->tasks()) {
    const int64_t start = StateTimeUs(task, rpc::TaskEvent::RUNNING);
    const int64_t end = EndTimeUs(task);
    if (start == 0 || end == 0) continue;  // did not run, or has not ended yet
    auto [node, added] = node_pids.try_emplace(task.node_id(), node_pids.size() + 1);
    if (added) {
      events.push_back({{"name", "process_name"},
                        {"ph", "M"},
                        {"pid", node->second},
                        {"args", {{"name", "Node " + BytesToHex(task.node_id())}}}});
    }
    const int tid = task.worker_pid();
    if (threads.emplace(std::make_pair(node->second, tid), task.worker_id()).second) {
      events.push_back(
          {{"name", "thread_name"},
           {"ph", "M"},
           {"pid", node->second},
           {"tid", tid},
           {"args",
            {{"name", absl::StrCat("Worker ", BytesToHex(task.worker_id()).substr(0, 8),
                                   " (pid ", tid, ")")}}}});
    }
    json args = {{"task_id", BytesToHex(task.task_id())},
                 {"attempt", task.attempt()},
                 {"state", rpc::TaskEvent::State_Name(task.state())},
                 {"job_id", BytesToHex(task.job_id())},
                 {"type", rpc::TaskSpec::Type_Name(task.type())}};
    if (!task.actor_id().empty()) args["actor_id"] = BytesToHex(task.actor_id());
    if (!task.error_message().empty()) args["error_message"] = task.error_message();
    events.push_back({{"name", task.name()},
                      {"cat", rpc::TaskSpec::Type_Name(task.type())},
                      {"ph", "X"},
                      {"ts", start},
                      {"dur", std::max<int64_t>(1, end - start)},
                      {"pid", node->second},
                      {"tid", tid},
                      {"args", args}});
  }
  return {200, {{"traceEvents", events}, {"displayTimeUnit", "ms"}}};
}

}  // namespace troupe::http
