// `troupe job submit|status|logs|stop|list|delete`: clients of the head's HTTP API (src/http),
// found and called through src/cli/http_api.h.
#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "src/cli/commands.h"
#include "src/cli/http_api.h"
#include "src/cli/log_stream.h"
#include "src/common/flag_parser.h"
#include "src/common/package.h"
#include "src/common/sha256.h"
#include "src/jobs/packages.h"

namespace troupe {
namespace {

using nlohmann::json;

// Times a dropped log stream is resumed before `--follow` gives up.
constexpr int kFollowRetries = 5;

std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_-./=:,+@%") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Streams the job's output until it ends, over the head's WebSocket tail (log_stream.h);
// a dropped connection is resumed from the last byte received (a few tries). Returns the final
// record; `*followed` says whether the whole log was streamed.
json Follow(const ApiTarget& api, const std::string& id, absl::Status* followed) {
  int64_t offset = 0;
  for (int attempt = 0;; ++attempt) {
    absl::Status& status = *followed;
    status = FollowJobLog(api, id, &offset, [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    });
    if (status.ok()) break;
    if (!absl::IsUnavailable(status) || attempt == kFollowRetries) {
      std::fprintf(stderr, "troupe job: following the log of '%s': %s\n", id.c_str(),
                   std::string(status.message()).c_str());
      break;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));  // then resume from `offset`
  }
  return Call(api, "GET", "/api/jobs/" + id).body;
}

int ExitCodeOf(const json& record) {
  const std::string status = record.value("status", "");
  if (status == "SUCCEEDED") return 0;
  if (status == "FAILED" && record.contains("driver_exit_code") &&
      record["driver_exit_code"].is_number() && record["driver_exit_code"].get<int>() != 0) {
    return record["driver_exit_code"].get<int>();
  }
  return 1;
}

int Submit(const std::vector<std::string>& all_args) {
  auto dashes = std::find(all_args.begin(), all_args.end(), "--");
  const std::vector<std::string> args(all_args.begin(), dashes);
  const std::vector<std::string> command(dashes == all_args.end() ? dashes : dashes + 1,
                                         all_args.end());
  ApiFlags api_flags;
  std::string working_dir, submission_id, metadata;
  double cpus = 0, gpus = 0;
  bool no_wait = false;
  FlagParser flags("troupe job submit",
                   "Runs CMD as a job on the cluster; waits and streams its output unless "
                   "--no-wait; exits with the job's status.\n  troupe job submit --working-dir . "
                   "-- ./my_app --epochs 5");
  api_flags.Register(&flags);
  flags.AddString(
      "working-dir", &working_dir,
      "Directory uploaded (<= 100 MiB) and unpacked where the job and its workers run.");
  flags.AddString("submission-id", &submission_id, "The job's id (default: generated).");
  flags.AddDouble("entrypoint-num-cpus", &cpus, "CPUs reserved for the entrypoint.");
  flags.AddDouble("entrypoint-num-gpus", &gpus, "GPUs reserved for the entrypoint.");
  flags.AddString("metadata", &metadata, "k=v[,k=v...] attached to the job.");
  flags.AddBool("no-wait", &no_wait, "Return once submitted.");
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) return std::printf("%s", flags.Usage().c_str()), 0;
  if (!parsed.ok()) return FailCommand("job submit", std::string(parsed.message()), 2);
  if (command.empty()) {
    return FailCommand("job submit",
                       "no command: put it after --, e.g. `troupe job submit -- ./my_app`", 2);
  }
  std::string error;
  auto api = api_flags.Resolve(&error);
  if (!api) return FailCommand("job submit", error);
  json request = {
      {"entrypoint", absl::StrJoin(command, " ", [](std::string* out, const std::string& a) {
         out->append(ShellQuote(a));
       })}};
  if (!submission_id.empty()) request["submission_id"] = submission_id;
  if (cpus > 0) request["entrypoint_num_cpus"] = cpus;
  if (gpus > 0) request["entrypoint_num_gpus"] = gpus;
  if (!metadata.empty()) {
    json meta = json::object();
    for (absl::string_view pair : absl::StrSplit(metadata, ',')) {
      std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      if (kv.size() != 2 || kv[0].empty()) {
        return FailCommand("job submit", "--metadata wants k=v[,k=v...], got '" + metadata + "'",
                           2);
      }
      meta[kv[0]] = kv[1];
    }
    request["metadata"] = meta;
  }
  if (!working_dir.empty()) {
    auto package = PackDirectory(working_dir);
    if (!package.ok())
      return FailCommand("job submit", "--working-dir: " + std::string(package.status().message()));
    const std::string digest = Sha256Hex(*package);
    const std::string path = "/api/packages/gcs/" + jobs::PackageName(digest);
    if (Call(*api, "GET", path).status != 200) {
      Response put = Call(*api, "PUT", path, *package, "application/octet-stream");
      if (put.status != 200)
        return FailCommand("job submit", "uploading --working-dir: " + Problem(put));
    }
    request["runtime_env"] = {{"working_dir", jobs::PackageUri(digest)}};
  }
  Response submitted = Call(*api, "POST", "/api/jobs/", request.dump());
  if (submitted.status != 200) return FailCommand("job submit", Problem(submitted));
  const std::string id = submitted.body.value("submission_id", "");
  std::fprintf(stderr, "Job '%s' submitted.\n", id.c_str());
  if (no_wait) {
    std::fprintf(stderr,
                 "  troupe job status %s\n  troupe job logs %s --follow\n  troupe job stop %s\n",
                 id.c_str(), id.c_str(), id.c_str());
    return 0;
  }
  absl::Status followed;
  json record = Follow(*api, id, &followed);
  std::fprintf(stderr, "Job '%s' %s: %s\n", id.c_str(), record.value("status", "?").c_str(),
               record.value("message", "").c_str());
  return ExitCodeOf(record);
}

// status / logs / stop / list / delete share their flags.
int Simple(const std::string& verb, const std::vector<std::string>& args) {
  ApiFlags api_flags;
  bool follow = false;
  static const std::map<std::string, std::string> kAbout = {
      {"status",
       "Prints a job's status (PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED) and "
       "message:\n  troupe job status ID"},
      {"logs",
       "Prints a job's output so far, or with --follow until it ends:\n  troupe job "
       "logs ID [--follow]"},
      {"stop", "Stops a running job, its workers and its actors:\n  troupe job stop ID"},
      {"list",
       "Lists every submitted job: id, status, exit code, entrypoint:\n  troupe job "
       "list"},
      {"delete", "Forgets a finished job (its record and output):\n  troupe job delete ID"}};
  FlagParser flags("troupe job " + verb, kAbout.at(verb));
  api_flags.Register(&flags);
  if (verb == "logs") flags.AddBool("follow", &follow, "Keep printing until the job ends.");
  // The parser tells flags from positional arguments, so `--address URL ID` and
  // `--address=URL ID` both work (splitting at "--" first took URL for the ID).
  auto parsed = flags.Parse(args);
  if (flags.help_requested()) return std::printf("%s", flags.Usage().c_str()), 0;
  if (!parsed.ok()) return FailCommand("job " + verb, std::string(parsed.message()), 2);
  const std::vector<std::string>& positional = flags.positional();
  if (verb == "list" && !positional.empty()) {
    return FailCommand("job list", "unexpected argument '" + positional[0] + "'", 2);
  }
  if (verb != "list" && positional.size() != 1) {
    return FailCommand("job " + verb, "give one submission id: troupe job " + verb + " <id>", 2);
  }
  std::string error;
  auto api = api_flags.Resolve(&error);
  if (!api) return FailCommand("job " + verb, error);
  const std::string id = positional.empty() ? "" : positional[0];
  if (verb == "logs" && follow) {
    absl::Status followed;
    Follow(*api, id, &followed);  // prints the output until the job ends
    return followed.ok() ? 0 : 1;
  }
  Response r = verb == "status"   ? Call(*api, "GET", "/api/jobs/" + id)
               : verb == "logs"   ? Call(*api, "GET", "/api/jobs/" + id + "/logs")
               : verb == "stop"   ? Call(*api, "POST", "/api/jobs/" + id + "/stop")
               : verb == "delete" ? Call(*api, "DELETE", "/api/jobs/" + id)
                                  : Call(*api, "GET", "/api/jobs/");
  if (r.status != 200) return FailCommand("job " + verb, Problem(r));
  if (verb == "status") {
    std::printf("%s: %s (%s)\n", id.c_str(), r.body.value("status", "?").c_str(),
                r.body.value("message", "").c_str());
  } else if (verb == "logs") {
    std::fputs(r.body.value("logs", "").c_str(), stdout);
  } else if (verb == "stop") {
    std::printf(
        r.body.value("stopped", false) ? "Stopping job '%s'.\n" : "Job '%s' was not running.\n",
        id.c_str());
  } else if (verb == "delete") {
    std::printf("Deleted job '%s'.\n", id.c_str());
  } else {
    std::printf("%-36s %-10s %-8s %s\n", "SUBMISSION ID", "STATUS", "EXIT", "ENTRYPOINT");
    for (const auto& job : r.body) {
      const std::string exit_code =
          job.contains("driver_exit_code") && job["driver_exit_code"].is_number()
              ? std::to_string(job["driver_exit_code"].get<int>())
              : "-";
      std::printf("%-36s %-10s %-8s %s\n", job.value("submission_id", "").c_str(),
                  job.value("status", "").c_str(), exit_code.c_str(),
                  job.value("entrypoint", "").c_str());
    }
  }
  return 0;
}

}  // namespace

int JobCommand(const std::vector<std::string>& args) {
  static const char kUsage[] =
      "Usage: troupe job <submit|status|logs|stop|list|delete> ...\n"
      "  submit [flags] -- CMD ARGS...   run CMD on the cluster (waits, streams output)\n"
      "  status ID                       PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED\n"
      "  logs ID [--follow]              the job's output\n"
      "  stop ID                         stop the job, its workers and actors\n"
      "  list                            every submitted job\n"
      "  delete ID                       forget a finished job\n"
      "Flags: --address=http://HEAD:8265 --token=T (defaults: the local head)\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("%s", kUsage);
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "submit") return Submit(rest);
  for (const char* verb : {"status", "logs", "stop", "list", "delete"}) {
    if (args[0] == verb) return Simple(verb, rest);
  }
  std::string hint;
  if (std::string close =
          ClosestName(args[0], {"submit", "status", "logs", "stop", "list", "delete"});
      !close.empty()) {
    hint = "; did you mean '" + close + "'?";
  }
  std::fprintf(stderr, "troupe job: unknown subcommand '%s'%s\n%s", args[0].c_str(), hint.c_str(),
               kUsage);
  return 2;
}

}  // namespace troupe
