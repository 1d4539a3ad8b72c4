// What the jobs REST API does, independent of HTTP: validate a submission, record it, start its
// supervisor actor, and answer status, logs, stop and delete. Every call returns an HTTP status
// and a JSON body (an {"error": ...} object for 4xx/5xx); request bodies are parsed with
// ParseBoundedJson (bounded_json.h), so no body can overflow the stack. Runs inside a Troupe
// driver (the head's HTTP server) and reads the GCS directly for records. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "nlohmann/json.hpp"
#include "src/rpc/gcs_client.h"

namespace troupe::jobs {

struct Reply {
  int status = 200;
  nlohmann::json body;
};

class JobService {
 public:
  explicit JobService(GcsClient* gcs) : gcs_(gcs) {}

  Reply Submit(const std::string& request_body);
  Reply List();
  Reply Get(const std::string& id);
  Reply Logs(const std::string& id);
  Reply Stop(const std::string& id);
  // Deletes a finished job's record and output after removing its working directory on the node
  // that ran it (a task pinned there, awaited): 500 saying what could not be removed, or 504
  // past kRemoveWorkingDirWaitSeconds, keeps the record so DELETE can be repeated. A node that is
  // not alive cannot be reached: the record goes and the reply's "message" says the directory
  // was left (`troupe stop` there removes it).
  Reply Delete(const std::string& id);
  // Working-directory packages (PUT/GET /api/packages/gcs/<name>). A package past the
  // PackageLimits (src/common/package.h) is refused: 413 for too many files or bytes, 400 for
  // paths too deep or too long, each naming the limit and the value.
  Reply PutPackage(const std::string& name, const std::string& bytes);
  Reply HasPackage(const std::string& name);

  // The record (after noticing a supervisor that died), or nullopt.
  std::optional<nlohmann::json> Record(const std::string& id);
  // Up to `max_bytes` of the job's log from byte `offset` (the KV copy: up to 300 ms behind a
  // running job), and the log's size so far. "" past the end or if there is no log yet.
  struct LogSlice {
    std::string text;
    int64_t size = 0;
  };
  LogSlice ReadLog(const std::string& id, int64_t offset, int64_t max_bytes);

  // One step of a log tail (GET /api/jobs/<id>/logs/tail): the log after byte `offset` (at most
  // kMaxTailStepBytes), as soon as there is some. Asks the job's supervisor, which answers when
  // output arrives or the job ends (a long poll of up to kTailWaitMs); once the supervisor is
  // gone (the job ended, or it died) or is too busy, reads the KV copy instead, waiting 300 ms
  // when that has nothing new either. `next_offset` is where the next step starts; `done`: the
  // job has ended and everything up to the log's end was returned.
  struct TailStep {
    std::string text;
    int64_t next_offset = 0;
    bool done = false;
  };
  TailStep WaitForLogs(const std::string& id, int64_t offset);

 private:
  // Removes the job's working directory: nullopt once it is gone (or was left on a dead node:
  // then `note` says so), else the error reply.
  std::optional<Reply> RemoveWorkingDir(const std::string& id, std::string* note);

  GcsClient* gcs_;
};

Reply Error(int status, const std::string& message);

// How long DELETE waits for a job's working directory to be removed.
inline constexpr int kRemoveWorkingDirWaitSeconds = 60;

// How long one log-tail step waits in the supervisor for new output.
inline constexpr int64_t kTailWaitMs = 10000;

}  // namespace troupe::jobs
