// GET /api/jobs/<id>/logs/tail: streams a job's output as chunked text/plain while it grows, and
// ends the stream once the job has ended and everything was sent. Each chunk is one
// JobService::WaitForLogs step: a long poll of the job's supervisor, which answers as soon as
// output arrives (no polling of the KV while the supervisor lives). Runs on the HTTP server's
// connection thread; thread-safe as JobService is.
#pragma once

#include <string>

#include "httplib.h"
#include "src/jobs/job_service.h"

namespace troupe::http {

// 404 (as JSON) if there is no such job; otherwise installs the chunked content provider.
// `jobs` must outlive the response.
void ServeLogTail(jobs::JobService* jobs, const std::string& id, httplib::Response& res);

}  // namespace troupe::http
