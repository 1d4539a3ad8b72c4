// `troupe list|get|summary|memory`: the cluster's state through the head's HTTP API
// (/api/v0/..., src/http/state_views.h and node_views.h), printed as tables, JSON or YAML
// (src/cli/state_format.h). System machinery (rows with "is_system": true) is hidden unless --all.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/cli/commands.h"
#include "src/cli/http_api.h"
#include "src/cli/state_format.h"
#include "src/common/flag_parser.h"
#include "src/common/ids.h"

namespace troupe {
namespace {

using nlohmann::json;

// What `troupe list KIND` reads, the key naming a row, and the table's columns.
struct Kind {
  std::string path;
  std::string id_key;
  std::vector<std::string> columns;
};

const std::map<std::string, Kind>& Kinds() {
  static const auto* kinds = new std::map<std::string, Kind>{
      {"tasks",
       {"/api/v0/tasks",
        "task_id",
        {"task_id", "attempt_number", "name", "state", "type", "node_id", "worker_pid",
         "error_message"}}},
      {"actors",
       {"/api/v0/actors",
        "actor_id",
        {"actor_id", "class_name", "name", "state", "node_id", "pid", "num_restarts"}}},
      {"objects",
       {"/api/v0/objects",
        "object_id",
        {"object_id", "node_id", "size", "copy", "spilled", "pins", "owner_worker_id"}}},
      {"workers",
       {"/api/v0/workers",
        "worker_id",
        {"worker_id", "node_id", "pid", "state", "job_id", "actor_id", "actor_class"}}},
      {"nodes",
       {"/api/v0/nodes",
        "node_id",
        {"node_id", "node_ip", "state", "is_head_node", "resources_total"}}},
      {"jobs", {"/api/v0/jobs", "job_id", {"job_id", "type", "status", "entrypoint"}}},
      {"placement-groups",
       {"/api/v0/placement_groups",
        "placement_group_id",
        {"placement_group_id", "name", "state", "strategy", "bundles", "is_detached"}}},
      // DataParallelTrainer runs (src/train/run_record.h); "changes" is derived (RowsOf).
      {"train-runs",
       {"/api/v0/train_runs",
        "run_id",
        {"run_id", "name", "status", "num_workers", "min_workers", "restarts", "changes"}}}};
  return *kinds;
}

// The kind a user's word names: plural or singular ("actors", "actor": Ray's CLI says
// `ray get actors ID`), placement groups also with an underscore; "" if none.
std::string KindOf(const std::string& word) {
  std::string kind = word;
  for (char& c : kind) c = c == '_' ? '-' : c;
  if (Kinds().count(kind)) return kind;
  if (Kinds().count(kind + "s")) return kind + "s";
  return "";
}

// "actors" -> "actor", for messages about one record.
std::string SingularOf(const std::string& kind) { return kind.substr(0, kind.size() - 1); }

std::string KindNames() {
  std::vector<std::string> names;
  for (const auto& [name, kind] : Kinds()) names.push_back(name);
  return absl::StrJoin(names, "|");
}

// Pulls every --filter X / --filter=X out of `args` (FlagParser has no repeated flags).
absl::StatusOr<std::vector<Filter>> TakeFilters(std::vector<std::string>* args) {
  std::vector<Filter> filters;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args->size(); ++i) {
    const std::string& arg = (*args)[i];
    std::string text;
    if (arg == "--filter" || arg == "-f") {
      if (i + 1 == args->size()) return absl::InvalidArgumentError("--filter needs KEY=VALUE");
      text = (*args)[++i];
    } else if (absl::StartsWith(arg, "--filter=")) {
      text = arg.substr(9);
    } else {
      rest.push_back(arg);
      continue;
    }
    auto filter = ParseFilter(text);
    if (!filter.ok()) return filter.status();
    filters.push_back(*filter);
  }
  *args = std::move(rest);
  return filters;
}

// Normalises what an endpoint answered: its rows (a bare array, or {"result": [...]}), with
// warnings for nodes that did not answer printed to stderr. Submitted jobs carry a
// submission_id where drivers carry a job_id: they get a job_id too.
json RowsOf(const std::string& command, const json& body) {
  json rows = body.is_array() ? body : body.value("result", json::array());
  if (body.is_object()) {
    for (const auto& node : body.value("unreachable_nodes", json::array())) {
      std::fprintf(stderr, "troupe %s: warning: node %s (%s) did not answer: %s\n", command.c_str(),
                   node.value("node_id", "?").c_str(), node.value("address", "?").c_str(),
                   node.value("error", "").c_str());
    }
  }
  for (auto& row : rows) {
    if (row.is_object() && !row.contains("job_id") && row.contains("submission_id")) {
      row["job_id"] = row["submission_id"];
      if (!row.contains("type")) row["type"] = "SUBMISSION";
    }
    // A training run's membership changes, one line each way a table can show them:
    // "gen 2: rank 2 left (died) in step 42, next step 0.250 s later; restart".
    if (row.is_object() && row.contains("run_id") && row.contains("membership") &&
        row["membership"].is_array()) {
      std::vector<std::string> changes;
      for (const auto& change : row["membership"]) {
        if (!change.is_object()) continue;
        if (change.value("change", "") == "restart") {
          changes.push_back("restart");
          continue;
        }
        std::vector<std::string> ranks;
        for (const auto& rank : change.value("ranks", json::array())) ranks.push_back(rank.dump());
        // "left" (in the step it failed in), or "joined" (a replacement, after a step).
        const bool joined = change.value("change", "") == "joined";
        std::string text = absl::StrCat("gen ", change.value("generation", int64_t{0}), ": rank ",
                                        absl::StrJoin(ranks, ","), joined ? " joined (" : " left (",
                                        change.value("why", std::string()), ")");
        const int64_t step = change.value("step", int64_t{-1});
        if (step >= 0 && joined) absl::StrAppend(&text, " after step ", step);
        if (step >= 0 && !joined) absl::StrAppend(&text, " in step ", step + 1);  // from 1
        const double recovery = change.value("recovery_s", -1.0);
        if (recovery >= 0)
          absl::StrAppend(&text, absl::StrFormat(", next step %.3f s later", recovery));
        changes.push_back(text);
      }
      row["changes"] = absl::StrJoin(changes, "; ");
    }
  }
  return rows;
}

// GETs a kind's rows; an error message (and false) if the head cannot answer. `total`, when
// given, gets how many rows matched before the server's limit (tasks; other kinds are never
// cut by the server: the row count).
bool FetchRows(const std::string& command, const ApiTarget& api, const std::string& kind,
               const std::string& query, json* rows, std::string* error, int64_t* total = nullptr) {
  Response r = Call(api, "GET", Kinds().at(kind).path + query);
  if (r.status == 404 && kind == "tasks") {
    *error = "this head does not track tasks (older version): GET /api/v0/tasks answered 404";
    return false;
  }
  if (r.status != 200) {
    *error = Problem(r);
    return false;
  }
  *rows = RowsOf(command, r.body);
  if (total != nullptr) {
    const json count = r.body.is_object() ? r.body.value("total", json()) : json();
    *total = count.is_number_integer() ? count.get<int64_t>() : static_cast<int64_t>(rows->size());
  }
  return true;
}

// Every attempt of the tasks whose ID starts with `prefix`: a whole ID is asked for by filter,
// a prefix over every task the head keeps (never just the first page).
bool FetchTasksById(const std::string& command, const ApiTarget& api, const std::string& prefix,
                    json* rows, std::string* error) {
  const std::string query =
      prefix.size() == 2 * TaskId::Size()
          ? "?detail=true&limit=0&filter=" +
                httplib::detail::encode_query_param("task_id=" + absl::AsciiStrToLower(prefix))
          : "?detail=true&limit=0";
  json all;
  if (!FetchRows(command, api, "tasks", query, &all, error)) return false;
  *rows = json::array();
  for (const auto& row : all) {
    if (row.is_object() &&
        absl::StartsWith(row.value("task_id", ""), absl::AsciiStrToLower(prefix))) {
      rows->push_back(row);
    }
  }
  return true;
}

std::string QueryOf(const std::vector<Filter>& filters, int64_t limit, bool detail) {
  std::vector<std::string> parts;
  for (const auto& f : filters) {
    parts.push_back("filter=" +
                    httplib::detail::encode_query_param(f.key + (f.negate ? "!=" : "=") + f.value));
  }
  if (limit >= 0) parts.push_back(absl::StrCat("limit=", limit));
  if (detail) parts.push_back("detail=true");
  return parts.empty() ? "" : "?" + absl::StrJoin(parts, "&");
}

// Every key appearing in `rows`, in first-seen order.
std::vector<std::string> AllColumns(const json& rows) {
  std::vector<std::string> columns;
  std::set<std::string> seen;
  for (const auto& row : rows) {
    if (!row.is_object()) continue;
    for (const auto& [key, value] : row.items()) {
      if (seen.insert(key).second) columns.push_back(key);
    }
  }
  return columns;
}

bool ValidFormat(const std::string& format) {
  return format == "table" || format == "json" || format == "yaml";
}

void Print(const std::string& format, const json& value, const std::vector<std::string>& columns) {
  if (format == "json") {
    std::printf("%s\n", value.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else if (format == "yaml") {
    std::printf("%s", FormatYaml(value).c_str());
  } else {
    std::printf("%s", FormatTable(columns, value).c_str());
  }
}

constexpr char kListAbout[] =
    "Lists the cluster's tasks, actors, objects, workers, nodes, jobs or placement groups "
    "(system jobs and actors hidden unless --all):\n"
    "  troupe list actors\n"
    "  troupe list actors --filter state=ALIVE --filter class_name!=Counter::Create\n"
    "  troupe list objects --limit 20 --format yaml\n"
    "  troupe list jobs --all --detail";

int List(const std::string& kind, std::vector<std::string> args) {
  ApiFlags api_flags;
  int64_t limit = 100;
  bool detail = false, all = false;
  std::string format = "table";
  FlagParser flags("troupe list " + kind, kListAbout);
  api_flags.Register(&flags);
  flags.AddInt("limit", &limit, "Show at most this many rows (0: all).");
  flags.AddBool("detail", &detail, "Every field as a column (json and yaml always show all).");
  flags.AddString("format", &format, "table, json or yaml.");
  flags.AddBool("all", &all, "Also show Troupe's own jobs, actors and workers.");
  flags.SetEpilog(
      "  --filter KEY=VALUE | KEY!=VALUE   keep matching rows (repeatable; values "
      "compare case-insensitively)\n");
  auto filters = TakeFilters(&args);
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) return std::printf("%s", flags.Usage().c_str()), 0;
  if (!parsed.ok()) return FailCommand("list", std::string(parsed.message()), 2);
  if (!filters.ok()) return FailCommand("list", std::string(filters.status().message()), 2);
  if (!ValidFormat(format)) return FailCommand("list", "--format is table, json or yaml", 2);
  if (limit < 0) return FailCommand("list", "--limit must be >= 0", 2);
  if (!flags.positional().empty()) {
    return FailCommand("list", "unexpected argument '" + flags.positional()[0] + "'", 2);
  }
  std::string error;
  auto api = api_flags.Resolve(&error);
  if (!api) return FailCommand("list", error);
  json rows;
  // Tasks are filtered and cut by the server (it may keep 100,000 of them), which says how many
  // matched; other kinds come whole, and the limit is applied here, after hiding.
  const bool server_cuts = kind == "tasks";
  int64_t server_total = 0;
  if (!FetchRows("list", *api, kind, QueryOf(*filters, server_cuts ? limit : -1, detail), &rows,
                 &error, &server_total)) {
    return FailCommand("list", error);
  }
  for (const auto& filter : *filters) {
    const bool known = std::any_of(rows.begin(), rows.end(), [&](const json& row) {
      return row.is_object() && row.contains(filter.key);
    });
    if (!rows.empty() && !known) {
      return FailCommand("list",
                         "no " + kind + " field '" + filter.key +
                             "' to filter on; fields: " + absl::StrJoin(AllColumns(rows), ", "),
                         2);
    }
  }
  json shown = json::array();
  int64_t matching = 0, hidden = 0;
  for (const auto& row : rows) {
    if (!all && row.is_object() && row.value("is_system", false)) {
      ++hidden;
      continue;
    }
    if (!Matches(row, *filters)) continue;
    ++matching;
    if (limit == 0 || static_cast<int64_t>(shown.size()) < limit) shown.push_back(row);
  }
  // Rows the server matched but did not send count as matching (and not shown).
  if (server_cuts)
    matching += std::max<int64_t>(0, server_total - static_cast<int64_t>(rows.size()));
  Print(format, shown, detail ? AllColumns(shown) : Kinds().at(kind).columns);
  // On stderr, so JSON and YAML on stdout stay parseable; always when rows were left out.
  const bool truncated = static_cast<int64_t>(shown.size()) < matching;
  if (format == "table" || truncated) {
    std::string note = absl::StrCat(matching, " ", kind);
    if (truncated) {
      absl::StrAppend(&note, ", ", shown.size(), " shown (--limit ", limit,
                      "; --limit 0 shows all)");
    }
    if (hidden > 0) absl::StrAppend(&note, "; ", hidden, " system ones hidden (--all shows them)");
    std::fprintf(stderr, "%s\n", note.c_str());
  }
  return 0;
}

int Get(const std::string& kind, std::vector<std::string> args) {
  const std::string singular = SingularOf(kind);
  ApiFlags api_flags;
  std::string format = "yaml";
  FlagParser flags("troupe get " + singular,
                   "Prints one " + singular +
                       "'s full record (an ID prefix is enough):\n  troupe get " + singular +
                       " ID [--format json]");
  api_flags.Register(&flags);
  flags.AddString("format", &format, "yaml or json.");
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) return std::printf("%s", flags.Usage().c_str()), 0;
  if (!parsed.ok()) return FailCommand("get", std::string(parsed.message()), 2);
  if (format != "yaml" && format != "json")
    return FailCommand("get", "--format is yaml or json", 2);
  if (flags.positional().size() != 1) {
    return FailCommand("get", "give one ID: troupe get " + singular + " ID", 2);
  }
  const std::string id = flags.positional()[0];
  std::string error;
  auto api = api_flags.Resolve(&error);
  if (!api) return FailCommand("get", error);
  const Kind& k = Kinds().at(kind);
  json rows;
  const bool fetched = kind == "tasks" ? FetchTasksById("get", *api, id, &rows, &error)
                                       : FetchRows("get", *api, kind, "", &rows, &error);
  if (!fetched) return FailCommand("get", error);
  json found = json::array();
  std::set<std::string> ids;
  for (const auto& row : rows) {
    const std::string row_id = row.is_object() ? CellText(row.value(k.id_key, json())) : "";
    if (!row_id.empty() && absl::StartsWith(row_id, id)) {
      found.push_back(row);
      ids.insert(row_id);
    }
  }
  if (found.empty())
    return FailCommand("get", "no " + singular + " with an ID starting with " + id);
  if (ids.size() > 1) {
    return FailCommand("get", absl::StrCat(ids.size(), " ", kind, " have IDs starting with ", id,
                                           ": give more of it"));
  }
  // A task has one record per attempt; everything else exactly one.
  Print(format, found.size() == 1 ? found[0] : found, {});
  return 0;
}

// Counts rows by (group, state): what `troupe summary` prints.
json CountBy(const json& rows, const std::string& group_key, const std::string& state_key) {
  std::map<std::string, std::map<std::string, int64_t>> counts;
  for (const auto& row : rows) {
    counts[CellText(row.value(group_key, json()))][CellText(row.value(state_key, json()))]++;
  }
  json out = json::array();
  for (const auto& [group, states] : counts) {
    json by_state = json::object();
    int64_t total = 0;
    for (const auto& [state, n] : states) {
      by_state[state] = n;
      total += n;
    }
    out.push_back({{group_key, group}, {"total", total}, {"state_counts", by_state}});
  }
  return out;
}

// `troupe summary tasks`: the head counts every task it keeps by name and state
// (/api/v0/tasks/summarize), so nothing is cut at a page size.
int SummarizeTasks(const ApiTarget& api, const std::string& format) {
  Response r = Call(api, "GET", "/api/v0/tasks/summarize");
  if (r.status == 404) {
    return FailCommand("summary",
                       "this head does not track tasks (older version): GET "
                       "/api/v0/tasks/summarize answered 404");
  }
  if (r.status != 200) return FailCommand("summary", Problem(r));
  json summary = json::array();
  const json by_name = r.body.value("summary", json::object());  // outlives the loop
  for (const auto& [name, entry] : by_name.items()) {
    int64_t total = 0;
    const json states = entry.value("state_counts", json::object());
    for (const auto& [state, n] : states.items()) total += n.is_number() ? n.get<int64_t>() : 0;
    summary.push_back({{"name", name},
                       {"type", entry.value("type", "")},
                       {"total", total},
                       {"state_counts", states}});
  }
  Print(format, summary, {"name", "type", "total", "state_counts"});
  if (int64_t dropped = r.body.value("num_dropped", int64_t{0}); dropped > 0) {
    std::fprintf(stderr,
                 "troupe summary: %lld task attempts are not counted: the head forgot or never "
                 "received them (see --max-task-events-per-job in docs/cli.md)\n",
                 static_cast<long long>(dropped));
  }
  return 0;
}

int Summary(const std::string& kind, const std::vector<std::string>& args) {
  ApiFlags api_flags;
  std::string format = "table";
  bool all = false;
  FlagParser flags(
      "troupe summary " + kind,
      "Counts the cluster's " + kind +
          (kind == "objects"
               ? " per node: copies, spilled, pinned, bytes"
               : " by " + std::string(kind == "tasks" ? "name" : "class") + " and state") +
          ":\n  troupe summary " + kind);
  api_flags.Register(&flags);
  flags.AddString("format", &format, "table, json or yaml.");
  flags.AddBool("all", &all, "Count Troupe's own actors too.");
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) return std::printf("%s", flags.Usage().c_str()), 0;
  if (!parsed.ok()) return FailCommand("summary", std::string(parsed.message()), 2);
  if (!ValidFormat(format)) return FailCommand("summary", "--format is table, json or yaml", 2);
  std::string error;
  auto api = api_flags.Resolve(&error);
  if (!api) return FailCommand("summary", error);
  if (kind == "tasks") return SummarizeTasks(*api, format);
  json rows;
  if (!FetchRows("summary", *api, kind, "", &rows, &error)) return FailCommand("summary", error);
  json visible = json::array();
  for (const auto& row : rows) {
    if (all || !row.value("is_system", false)) visible.push_back(row);
  }
  json summary;
  std::vector<std::string> columns;
  if (kind == "objects") {
    std::map<std::string, json> by_node;
    for (const auto& o : visible) {
      json& n = by_node[o.value("node_id", "")];
      if (n.is_null())
        n = {{"node_id", o.value("node_id", "")},
             {"objects", 0},
             {"primary", 0},
             {"secondary", 0},
             {"spilled", 0},
             {"pinned", 0},
             {"bytes", 0}};
      n["objects"] = n["objects"].get<int64_t>() + 1;
      const char* copy = o.value("copy", "") == "PRIMARY" ? "primary" : "secondary";
      n[copy] = n[copy].get<int64_t>() + 1;
      if (o.value("spilled", false)) n["spilled"] = n["spilled"].get<int64_t>() + 1;
      if (o.value("pins", 0) > 0) n["pinned"] = n["pinned"].get<int64_t>() + 1;
      n["bytes"] = n["bytes"].get<int64_t>() + o.value("size", int64_t{0});
    }
    summary = json::array();
    for (auto& [node, n] : by_node) summary.push_back(n);
    columns = {"node_id", "objects", "primary", "secondary", "spilled", "pinned", "bytes"};
  } else {
    const std::string group = kind == "tasks" ? "name" : "class_name";
    summary = CountBy(visible, group, "state");
    columns = {group, "total", "state_counts"};
  }
  Print(format, summary, columns);
  return 0;
}

std::string Bytes(int64_t n) {
  if (n >= (int64_t{1} << 30)) return absl::StrFormat("%.1f GiB", n / double(int64_t{1} << 30));
  if (n >= (1 << 20)) return absl::StrFormat("%.1f MiB", n / double(1 << 20));
  if (n >= (1 << 10)) return absl::StrFormat("%.1f KiB", n / double(1 << 10));
  return absl::StrCat(n, " B");
}

int Memory(const std::vector<std::string>& args) {
  ApiFlags api_flags;
  std::string format = "table", node_filter;
  FlagParser flags("troupe memory",
                   "The objects in the cluster's object stores, grouped by node: size, owner, "
                   "primary or secondary copy, spilled, and which worker processes pin them "
                   "(like `ray memory`):\n  troupe memory\n  troupe memory --node-id 3fa2");
  api_flags.Register(&flags);
  flags.AddString("node-id", &node_filter, "Only this node (an ID prefix).");
  flags.AddString("format", &format, "table or json.");
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) return std::printf("%s", flags.Usage().c_str()), 0;
  if (!parsed.ok()) return FailCommand("memory", std::string(parsed.message()), 2);
  if (format != "table" && format != "json")
    return FailCommand("memory", "--format is table or json", 2);
  std::string error;
  auto api = api_flags.Resolve(&error);
  if (!api) return FailCommand("memory", error);
  json objects, workers;
  if (!FetchRows("memory", *api, "objects", "", &objects, &error))
    return FailCommand("memory", error);
  if (!FetchRows("memory", *api, "workers", "", &workers, &error)) workers = json::array();
  std::map<std::string, int> pid_of;  // worker ID -> pid
  for (const auto& w : workers) pid_of[w.value("worker_id", "")] = w.value("pid", 0);
  auto who = [&](const std::string& worker_id) {
    if (worker_id.empty()) return std::string("-");
    auto it = pid_of.find(worker_id);
    return worker_id.substr(0, 8) +
           (it != pid_of.end() ? absl::StrCat(" (pid ", it->second, ")") : std::string());
  };
  std::map<std::string, json> by_node;
  for (auto& o : objects) {
    if (!absl::StartsWith(o.value("node_id", ""), node_filter)) continue;
    json pinned = json::array();
    for (const auto& pin : o.value("pinned_by", json::array())) {
      pinned.push_back(absl::StrCat(who(pin.value("worker_id", "")), " x", pin.value("count", 0)));
    }
    o["owner"] = who(o.value("owner_worker_id", ""));
    o["pinned_by_text"] = absl::StrJoin(pinned.get<std::vector<std::string>>(), ", ");
    json& node = by_node[o.value("node_id", "")];
    if (node.is_null())
      node = {{"node_id", o.value("node_id", "")},
              {"node_ip", o.value("node_ip", "")},
              {"objects", json::array()},
              {"memory_bytes", 0},
              {"spilled_bytes", 0}};
    node[o.value("spilled", false) ? "spilled_bytes" : "memory_bytes"] =
        node[o.value("spilled", false) ? "spilled_bytes" : "memory_bytes"].get<int64_t>() +
        o.value("size", int64_t{0});
    node["objects"].push_back(o);
  }
  if (format == "json") {
    json out = json::array();
    for (auto& [id, node] : by_node) out.push_back(node);
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  int64_t total_objects = 0, total_memory = 0, total_spilled = 0;
  for (auto& [id, node] : by_node) {
    json rows = json::array();
    for (auto& o : node["objects"]) {
      rows.push_back({{"object_id", o["object_id"]},
                      {"size", Bytes(o.value("size", int64_t{0}))},
                      {"copy", o["copy"]},
                      {"spilled", o["spilled"]},
                      {"owner", o["owner"]},
                      {"pinned_by", o["pinned_by_text"]}});
    }
    std::printf("--- Node %s (%s) ---\n", id.c_str(), node.value("node_ip", "").c_str());
    std::printf(
        "%s",
        FormatTable({"object_id", "size", "copy", "spilled", "owner", "pinned_by"}, rows).c_str());
    std::printf("%zu objects, %s in memory, %s spilled\n\n", rows.size(),
                Bytes(node["memory_bytes"].get<int64_t>()).c_str(),
                Bytes(node["spilled_bytes"].get<int64_t>()).c_str());
    total_objects += static_cast<int64_t>(rows.size());
    total_memory += node["memory_bytes"].get<int64_t>();
    total_spilled += node["spilled_bytes"].get<int64_t>();
  }
  std::printf("Total: %lld objects on %zu nodes, %s in memory, %s spilled\n",
              static_cast<long long>(total_objects), by_node.size(), Bytes(total_memory).c_str(),
              Bytes(total_spilled).c_str());
  return 0;
}

// `troupe VERB --help` / bad usage for the verbs taking a kind.
int KindUsage(const std::string& verb, const std::string& kinds, const std::string& about,
              const std::vector<std::string>& args) {
  std::vector<std::string> known;
  for (const auto& [name, kind] : Kinds()) {
    known.push_back(name);
    known.push_back(SingularOf(name));
  }
  const std::string usage = "Usage: troupe " + verb + " <" + kinds + "> [flags]\n  " + about +
                            "\n`troupe " + verb + " KIND --help` shows the flags.\n";
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    std::printf("%s", usage.c_str());
    return 0;
  }
  if (args.empty()) {
    std::fprintf(stderr, "troupe %s: say what to %s\n%s", verb.c_str(), verb.c_str(),
                 usage.c_str());
  } else {
    std::string hint;
    if (std::string close = ClosestName(args[0], known); !close.empty()) {
      hint = "; did you mean '" + close + "'?";
    }
    std::fprintf(stderr, "troupe %s: unknown kind '%s'%s\n%s", verb.c_str(), args[0].c_str(),
                 hint.c_str(), usage.c_str());
  }
  return 2;
}

}  // namespace

int ListCommand(const std::vector<std::string>& args) {
  const std::string kind = args.empty() ? "" : KindOf(args[0]);
  if (kind.empty()) {
    return KindUsage("list", KindNames(),
                     "Lists the cluster's state as a table, JSON or YAML "
                     "(--filter k=v, --limit N, --detail, --format, --all).",
                     args);
  }
  return List(kind, std::vector<std::string>(args.begin() + 1, args.end()));
}

int GetCommand(const std::vector<std::string>& args) {
  const std::string kind = args.empty() ? "" : KindOf(args[0]);
  if (kind.empty()) {
    return KindUsage("get", "task|actor|object|worker|node|job|placement-group|train-run",
                     "Prints one record in full: troupe get actor ID [--format json] (the plural, "
                     "as in `troupe get actors ID`, works too).",
                     args);
  }
  return Get(kind, std::vector<std::string>(args.begin() + 1, args.end()));
}

int SummaryCommand(const std::vector<std::string>& args) {
  const std::string kind = args.empty() ? "" : KindOf(args[0]);
  if (kind != "tasks" && kind != "actors" && kind != "objects") {
    return KindUsage("summary", "tasks|actors|objects",
                     "Counts tasks by name and state, actors by class and state, objects per node.",
                     args);
  }
  return Summary(kind, std::vector<std::string>(args.begin() + 1, args.end()));
}

int MemoryCommand(const std::vector<std::string>& args) { return Memory(args); }

}  // namespace troupe
