// What the jobs REST API does, independent of HTTP: validate a submission, record it, start its
// supervisor actor, and answer status, logs, stop and delete. Every call returns an HTTP status
// and a JSON body (an {"error": ...} object for 4xx/5xx). Runs inside a Troupe driver (the head's
// HTTP server) and reads the GCS directly for records. Thread-safe.
#pragma once

#include <memory>
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
  Reply Delete(const std::string& id);
  // Working-directory packages (PUT/GET /api/packages/gcs/<name>).
  Reply PutPackage(const std::string& name, const std::string& bytes);
  Reply HasPackage(const std::string& name);

  // The record (after noticing a supervisor that died), or nullopt.
  std::optional<nlohmann::json> Record(const std::string& id);
  // The job's recent output ("" if none yet).
  std::string LogText(const std::string& id);

 private:
  GcsClient* gcs_;
};

Reply Error(int status, const std::string& message);

}  // namespace troupe::jobs
