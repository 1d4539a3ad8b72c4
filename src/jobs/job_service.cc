#include "src/jobs/job_service.h"

#include <chrono>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "src/common/ids.h"
#include "src/common/sha256.h"
#include "src/jobs/bounded_json.h"
#include "src/jobs/job_record.h"
#include "src/jobs/packages.h"
#include "src/jobs/supervisor.h"
#include "troupe/api.h"

namespace troupe::jobs {
namespace {

using nlohmann::json;

int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A supervisor that has been gone this long while its job still looked alive means it died.
constexpr int64_t kSupervisorGraceMs = 5000;

bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

std::optional<ActorHandle<JobSupervisor>> Supervisor(const std::string& id) {
  return GetActor<JobSupervisor>(SupervisorName(id), kSupervisorNamespace);
}

}  // namespace

Reply Error(int status, const std::string& message) { return {status, json{{"error", message}}}; }

Reply JobService::Submit(const std::string& request_body) {
  // Bounded: a deeply nested body would overflow the stack in nlohmann's recursive copies.
  absl::StatusOr<json> parsed = ParseBoundedJson(request_body, "the body");
  if (!parsed.ok()) return Error(400, std::string(parsed.status().message()));
  json request = *std::move(parsed);
  if (!request.is_object()) return Error(400, "the body must be a JSON object");
  static const std::set<std::string> kKnown = {"entrypoint",
                                               "submission_id",
                                               "runtime_env",
                                               "metadata",
                                               "entrypoint_num_cpus",
                                               "entrypoint_num_gpus",
                                               "entrypoint_memory",
                                               "entrypoint_resources",
                                               "job_id",
                                               "entrypoint_label_selector"};
  for (const auto& [key, value] : request.items()) {
    if (!kKnown.count(key)) {
      return Error(400, "unknown field '" + key +
                            "'; accepted: entrypoint, submission_id, runtime_env, metadata, "
                            "entrypoint_num_cpus, entrypoint_num_gpus, entrypoint_memory, "
                            "entrypoint_resources");
    }
  }
  if (!request.contains("entrypoint") || request["entrypoint"].is_null()) {
    return Error(400,
                 "field 'entrypoint' is required: the shell command to run, e.g. "
                 "\"./my_app --epochs 5\"");
  }
  if (!request["entrypoint"].is_string()) {
    return Error(400, std::string("field 'entrypoint' must be a string (the shell command to "
                                  "run, e.g. \"./my_app --epochs 5\"), not ") +
                          request["entrypoint"].type_name());
  }
  if (request["entrypoint"].get<std::string>().empty()) {
    return Error(400, "field 'entrypoint' must not be empty: the shell command to run, e.g. "
                      "\"./my_app --epochs 5\"");
  }
  std::string id;
  if (request.contains("submission_id") && !request["submission_id"].is_null()) {
    if (!request["submission_id"].is_string() || !ValidId(request["submission_id"])) {
      return Error(400,
                   "field 'submission_id' must be 1-128 characters of letters, digits, "
                   "'_', '-' or '.'");
    }
    id = request["submission_id"];
  } else {
    std::random_device random;
    id = absl::StrFormat("troupe_job_%08x%08x", random(), random());
  }
  json runtime_env = request.value("runtime_env", json::object());
  if (!runtime_env.is_object()) return Error(400, "field 'runtime_env' must be an object");
  for (const auto& [key, value] : runtime_env.items()) {
    if (key != "working_dir") {
      return Error(400, "runtime_env." + key + " is not supported; only runtime_env.working_dir");
    }
  }
  if (runtime_env.contains("working_dir")) {
    if (!runtime_env["working_dir"].is_string()) {
      return Error(400, "field 'runtime_env.working_dir' must be a string");
    }
    auto digest = ParsePackageUri(runtime_env["working_dir"]);
    if (!digest.ok()) return Error(400, std::string(digest.status().message()));
    auto exists = gcs_->KVExists(kPackagesNamespace, *digest);
    if (!exists.ok()) return Error(503, std::string(exists.status().message()));
    if (!*exists) {
      return Error(400, "runtime_env.working_dir " + runtime_env["working_dir"].get<std::string>() +
                            " has not been uploaded: PUT it to /api/packages/gcs/" +
                            PackageName(*digest) + " first");
    }
  }
  json metadata = request.value("metadata", json::object());
  if (!metadata.is_object()) return Error(400, "field 'metadata' must be an object of strings");
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string()) return Error(400, "metadata." + key + " must be a string");
  }
  std::map<std::string, double> resources;
  for (const auto& [field, resource] :
       std::map<std::string, std::string>{{"entrypoint_num_cpus", "CPU"},
                                          {"entrypoint_num_gpus", "GPU"},
                                          {"entrypoint_memory", "memory"}}) {
    if (!request.contains(field) || request[field].is_null()) continue;
    if (!request[field].is_number() || request[field].get<double>() < 0) {
      return Error(400, "field '" + field + "' must be a number >= 0");
    }
    const double amount = request[field];
    if (amount > 0) resources[resource] = amount;
  }
  if (request.contains("entrypoint_label_selector") &&
      !request["entrypoint_label_selector"].is_null() &&
      !request["entrypoint_label_selector"].empty()) {
    return Error(400, "entrypoint_label_selector is not supported; use entrypoint_resources");
  }
  if (request.contains("entrypoint_resources") && !request["entrypoint_resources"].is_null()) {
    const json& custom = request["entrypoint_resources"];
    if (!custom.is_object()) return Error(400, "field 'entrypoint_resources' must be an object");
    for (const auto& [name, amount] : custom.items()) {
      if (!amount.is_number() || amount.get<double>() < 0) {
        return Error(400, "entrypoint_resources." + name + " must be a number >= 0");
      }
      if (amount.get<double>() > 0) resources[name] = amount;
    }
  }

  json record = {{"type", "SUBMISSION"},
                 {"job_id", nullptr},
                 {"submission_id", id},
                 {"status", kPending},
                 {"entrypoint", request["entrypoint"]},
                 {"message", "waiting for the job supervisor to start"},
                 {"error_type", nullptr},
                 {"start_time", NowMillis()},
                 {"end_time", nullptr},
                 {"metadata", metadata},
                 {"runtime_env", runtime_env},
                 {"entrypoint_num_cpus", request.value("entrypoint_num_cpus", json(0))},
                 {"entrypoint_num_gpus", request.value("entrypoint_num_gpus", json(0))},
                 {"entrypoint_resources", request.value("entrypoint_resources", json::object())},
                 {"driver_exit_code", nullptr},
                 {"driver_node_id", nullptr}};
  // Acknowledged only once the record is saved (with Redis: Redis took it); else 503, and the
  // client may retry with the same submission_id (409 then means the first try was saved).
  auto added = gcs_->KVPut(kJobsNamespace, RecordKey(id), record.dump(), /*overwrite=*/false);
  if (!added.ok()) {
    return Error(503, absl::StrCat("the job '", id,
                                   "' was not submitted: its record could not be "
                                   "saved (",
                                   added.status().message(), ")"));
  }
  if (!*added) return Error(409, "a job with submission_id '" + id + "' already exists");

  try {
    auto creator = Actor(JobSupervisor::Create)
                       .SetName(SupervisorName(id))
                       .SetNamespace(kSupervisorNamespace)
                       .SetLifetime(Detached{})
                       .SetMaxConcurrency(kSupervisorConcurrency);  // Stop, tails, Run
    if (!resources.empty()) {
      creator.SetResources(resources);
    } else if (auto info = gcs_->GetAllNodeInfo(); info.ok()) {
      for (const auto& node : *info) {  // no resources asked for: the head runs it
        if (node.is_head() && node.state() == rpc::NodeInfo::ALIVE) {
          creator.SetSchedulingStrategy(NodeAffinity{BytesToHex(node.node_id()), /*soft=*/true});
        }
      }
    }
    ActorHandle<JobSupervisor> supervisor = creator.Remote(id);
    supervisor.Task(&JobSupervisor::Run).Remote();  // the record tells how it ends
  } catch (const TroupeError& e) {
    record["status"] = kFailed;
    record["message"] = std::string("could not start the job supervisor: ") + e.what();
    record["end_time"] = NowMillis();
    (void)gcs_->KVPut(kJobsNamespace, RecordKey(id), record.dump(), true);
    return Error(500, record["message"]);
  }
  return {200, json{{"job_id", id}, {"submission_id", id}}};
}

std::optional<json> JobService::Record(const std::string& id) {
  auto value = gcs_->KVGet(kJobsNamespace, RecordKey(id));
  if (!value.ok() || !value->has_value()) return std::nullopt;
  // Any token holder can write the KV: parse records with the same bound as requests.
  absl::StatusOr<json> parsed = ParseBoundedJson(**value, "the job record");
  if (!parsed.ok()) return std::nullopt;
  json record = *std::move(parsed);
  // A job still PENDING/RUNNING whose supervisor is gone will never be updated: it failed.
  const std::string status = record.value("status", "");
  if (!IsTerminal(status) &&
      NowMillis() - record.value("start_time", int64_t{0}) > kSupervisorGraceMs &&
      !Supervisor(id).has_value()) {
    auto again = gcs_->KVGet(kJobsNamespace, RecordKey(id));  // it may have just finished
    if (again.ok() && again->has_value()) {
      if (auto reread = ParseBoundedJson(**again, "the job record"); reread.ok()) {
        record = *std::move(reread);
      }
    }
    if (!IsTerminal(record.value("status", ""))) {
      record["status"] = kFailed;
      record["message"] = "the job supervisor died (its node or process failed)";
      record["error_type"] = "JOB_SUPERVISOR_ACTOR_DIED";
      record["end_time"] = NowMillis();
      (void)gcs_->KVPut(kJobsNamespace, RecordKey(id), record.dump(), true);
    }
  }
  return record;
}

JobService::LogSlice JobService::ReadLog(const std::string& id, int64_t offset,
                                         int64_t max_bytes) {
  LogSlice slice;
  auto size = gcs_->KVGet(kJobsNamespace, LogsKey(id));
  if (!size.ok() || !size->has_value()) return slice;
  slice.size = std::max<int64_t>(0, std::strtoll((*size)->c_str(), nullptr, 10));
  const int64_t end = std::min(slice.size, offset + max_bytes);
  for (int64_t n = offset / kLogChunkBytes; offset < end && n * kLogChunkBytes < end; ++n) {
    auto chunk = gcs_->KVGet(kJobsNamespace, LogChunkKey(id, n));
    if (!chunk.ok() || !chunk->has_value()) break;  // deleted meanwhile
    const int64_t chunk_begin = n * kLogChunkBytes;
    const int64_t from = std::max(offset, chunk_begin) - chunk_begin;
    const int64_t to = std::min<int64_t>(end - chunk_begin, (*chunk)->size());
    if (to > from) slice.text.append(**chunk, from, to - from);
  }
  return slice;
}

JobService::TailStep JobService::WaitForLogs(const std::string& id, int64_t offset) {
  if (auto supervisor = Supervisor(id)) {
    try {
      const OutputChunk chunk =
          *troupe::Get(supervisor->Task(&JobSupervisor::WaitForOutput).Remote(offset, kTailWaitMs),
                       std::chrono::milliseconds(kTailWaitMs + 10000));
      if (!chunk.busy) {
        return {chunk.text, chunk.text.empty() ? offset : chunk.end, chunk.finished};
      }
    } catch (const TroupeError&) {
      // Gone (it exits once the job ends), not yet started, or unreachable: the KV has the rest.
    }
  }
  auto record = Record(id);  // before the log: a finished record means the log is complete
  const LogSlice slice = ReadLog(id, offset, kMaxTailStepBytes);
  if (!slice.text.empty()) {
    return {slice.text, offset + static_cast<int64_t>(slice.text.size()), false};
  }
  if (!record || IsTerminal(record->value("status", ""))) return {"", offset, true};
  // Neither new output nor an end, and no supervisor to wait on: don't spin.
  absl::SleepFor(absl::Milliseconds(300));
  return {"", offset, false};
}

Reply JobService::List() {
  auto keys = gcs_->KVKeys(kJobsNamespace, kRecordKeyPrefix);
  if (!keys.ok()) return Error(503, std::string(keys.status().message()));
  json jobs = json::array();
  for (const auto& key : *keys) {
    if (auto record = Record(key.substr(sizeof(kRecordKeyPrefix) - 1))) jobs.push_back(*record);
  }
  return {200, jobs};
}

Reply JobService::Get(const std::string& id) {
  auto record = Record(id);
  if (!record) return Error(404, "no job with submission_id '" + id + "'");
  return {200, *record};
}

Reply JobService::Logs(const std::string& id) {
  if (!Record(id)) return Error(404, "no job with submission_id '" + id + "'");
  return {200, json{{"logs", ReadLog(id, 0, kMaxJobLogBytes + kLogChunkBytes).text}}};
}

Reply JobService::Stop(const std::string& id) {
  auto record = Record(id);
  if (!record) return Error(404, "no job with submission_id '" + id + "'");
  if (IsTerminal(record->value("status", ""))) return {200, json{{"stopped", false}}};
  auto supervisor = Supervisor(id);
  if (!supervisor) return {200, json{{"stopped", false}}};
  try {
    const bool stopped =
        *troupe::Get(supervisor->Task(&JobSupervisor::Stop).Remote(), std::chrono::seconds(10));
    return {200, json{{"stopped", stopped}}};
  } catch (const TroupeError& e) {
    return Error(503, std::string("could not reach the job supervisor: ") + e.what());
  }
}

Reply JobService::Delete(const std::string& id) {
  auto record = Record(id);
  if (!record) return Error(404, "no job with submission_id '" + id + "'");
  const std::string status = record->value("status", "");
  if (!IsTerminal(status)) {
    return Error(400, "job '" + id + "' is " + status + ": stop it before deleting it");
  }
  std::string note;
  if (std::optional<Reply> failed = RemoveWorkingDir(id, &note)) return *failed;
  (void)gcs_->KVDel(kJobsNamespace, RecordKey(id), false);
  (void)gcs_->KVDel(kJobsNamespace, LogsKey(id), false);
  (void)gcs_->KVDel(kJobsNamespace, LogsKey(id) + "/", /*by_prefix=*/true);  // the chunks
  json reply = {{"deleted", true}};
  if (!note.empty()) reply["message"] = note;
  return {200, reply};
}

std::optional<Reply> JobService::RemoveWorkingDir(const std::string& id, std::string* note) {
  auto where = gcs_->KVGet(kJobsNamespace, WorkingDirKey(id));
  if (!where.ok()) return Error(503, std::string(where.status().message()));
  if (!where->has_value()) return std::nullopt;
  const std::string& value = **where;
  const size_t space = value.find(' ');
  if (space != std::string::npos) {
    const std::string node = value.substr(0, space), name = value.substr(space + 1);
    bool alive = false;
    auto nodes = gcs_->GetAllNodeInfo();
    if (!nodes.ok()) return Error(503, std::string(nodes.status().message()));
    for (const auto& info : *nodes) {
      alive |= BytesToHex(info.node_id()) == node && info.state() == rpc::NodeInfo::ALIVE;
    }
    const std::string what = "the working directory of job '" + id + "' (" + name + " on node " +
                             node.substr(0, 12) + ")";
    if (!alive) {
      // Nothing can reach it; the node's session goes, with it, at `troupe stop` there.
      *note = what + " was left: the node is not alive (`troupe stop` on it removes it)";
    } else {
      std::string error;
      try {
        // Zero resources: it must not wait behind the node's work.
        error = *troupe::Get(troupe::Task(RemoveJobWorkingDir)
                                 .SetResources({})
                                 .SetMaxRetries(0)
                                 .SetSchedulingStrategy(NodeAffinity{node, /*soft=*/false})
                                 .Remote(name),
                             std::chrono::seconds(kRemoveWorkingDirWaitSeconds));
      } catch (const GetTimeoutError&) {
        return Error(
            504, absl::StrCat("removing ", what, " took more than ", kRemoveWorkingDirWaitSeconds,
                              " s; it goes on: DELETE again to see it finish "
                              "(the job's record is kept until then)"));
      } catch (const TroupeError& e) {
        error = e.what();
      }
      if (!error.empty()) {
        return Error(500, "could not remove " + what + ": " + error +
                              ". The job's record is kept: fix the cause and DELETE again");
      }
    }
  }
  (void)gcs_->KVDel(kJobsNamespace, WorkingDirKey(id), false);
  return std::nullopt;
}

Reply JobService::PutPackage(const std::string& name, const std::string& bytes) {
  auto digest = ParsePackageName(name);
  if (!digest.ok()) return Error(400, std::string(digest.status().message()));
  if (static_cast<int64_t>(bytes.size()) > kMaxPackageBytes) {
    return Error(413, absl::StrCat("the package is ", bytes.size() >> 20, " MiB; the limit is ",
                                   kMaxPackageBytes >> 20,
                                   " MiB (leave large data out of "
                                   "working_dir and read it from shared storage)"));
  }
  if (Sha256Hex(bytes) != *digest) {
    return Error(400, "the body's SHA-256 does not match the package name");
  }
  // Refused here rather than when a job unpacks it: what it would make on disk is capped.
  if (absl::Status checked = CheckPackage(bytes); !checked.ok()) {
    return Error(checked.code() == absl::StatusCode::kResourceExhausted ? 413 : 400,
                 "package " + name + " refused: " + std::string(checked.message()));
  }
  auto put = gcs_->KVPut(kPackagesNamespace, *digest, bytes, /*overwrite=*/false);
  if (!put.ok()) {
    // 507 Insufficient Storage: the GCS's KV quota (the message says what to do); else 503.
    const bool full = put.status().code() == absl::StatusCode::kResourceExhausted;
    return Error(full ? 507 : 503, std::string(put.status().message()));
  }
  return {200, json{{"uploaded", *put}}};
}

Reply JobService::HasPackage(const std::string& name) {
  auto digest = ParsePackageName(name);
  if (!digest.ok()) return Error(400, std::string(digest.status().message()));
  auto exists = gcs_->KVExists(kPackagesNamespace, *digest);
  if (!exists.ok()) return Error(503, std::string(exists.status().message()));
  if (!*exists) return Error(404, "package " + name + " has not been uploaded");
  return {200, json{{"exists", true}}};
}

}  // namespace troupe::jobs
