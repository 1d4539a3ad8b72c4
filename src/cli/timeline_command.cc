// `troupe timeline [--job ID] -o trace.json`: writes the cluster's task timeline (GET
// /api/v0/timeline on the head's HTTP API, src/http/task_views.h) as Chrome trace-event JSON, to
// open in Perfetto (ui.perfetto.dev) or chrome://tracing.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/cli/commands.h"
#include "src/cli/http_api.h"
#include "src/common/flag_parser.h"

namespace troupe {
namespace {

int Fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "troupe timeline: %s\n", message.c_str());
  return code;
}

}  // namespace

int TimelineCommand(const std::vector<std::string>& args) {
  ApiFlags api_flags;
  std::string job, output;
  FlagParser flags("troupe timeline",
                   "Writes the timeline of task execution (one bar per task run, per node and "
                   "worker) as Chrome trace-event JSON; open it in https://ui.perfetto.dev or "
                   "chrome://tracing.\n  troupe timeline -o trace.json\n  troupe timeline "
                   "--job=00000001 -o trace.json");
  api_flags.Register(&flags);
  flags.AddString("job", &job, "Only this job's tasks (its hex ID, as `troupe list jobs` shows).");
  flags.AddString("output", &output, "File to write (required; -o works too).");
  // -o FILE is the short form Ray's users know.
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-o" && i + 1 < args.size()) {
      rest.push_back("--output=" + args[++i]);
    } else {
      rest.push_back(args[i]);
    }
  }
  auto parsed = flags.Parse(rest);
  if (flags.help_requested()) return std::printf("%s", flags.Usage().c_str()), 0;
  if (!parsed.ok()) return Fail(std::string(parsed.message()), 2);
  if (output.empty()) return Fail("say where to write the trace: -o trace.json", 2);
  std::string error;
  auto api = api_flags.Resolve(&error);
  if (!api) return Fail(error);
  const std::string path =
      job.empty() ? "/api/v0/timeline" : absl::StrCat("/api/v0/timeline?job_id=", job);
  Response r = Call(*api, "GET", path);
  if (r.status != 200) return Fail(Problem(r));
  std::ofstream out(output);
  out << r.body.dump() << "\n";
  if (!out.good()) return Fail("cannot write " + output);
  size_t runs = 0;
  for (const auto& event : r.body.value("traceEvents", nlohmann::json::array())) {
    runs += event.value("ph", "") == "X";
  }
  std::printf("wrote %zu task runs to %s (open it in https://ui.perfetto.dev or chrome://tracing)\n",
              runs, output.c_str());
  return 0;
}

}  // namespace troupe
