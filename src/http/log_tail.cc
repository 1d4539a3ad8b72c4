#include "src/http/log_tail.h"

#include <memory>

namespace troupe::http {

void ServeLogTail(jobs::JobService* jobs, const std::string& id, httplib::Response& res) {
  if (!jobs->Record(id)) {
    const jobs::Reply reply = jobs::Error(404, "no job with submission_id '" + id + "'");
    res.status = reply.status;
    res.set_content(reply.body.dump(), "application/json");
    return;
  }
  auto sent = std::make_shared<int64_t>(0);  // bytes of the job's output sent so far
  res.set_chunked_content_provider("text/plain", [jobs, id, sent](size_t, httplib::DataSink& sink) {
    const jobs::JobService::TailStep step = jobs->WaitForLogs(id, *sent);
    if (!step.text.empty()) {
      if (!sink.write(step.text.data(), step.text.size())) return false;  // client left
      *sent = step.next_offset;
    }
    if (step.done) sink.done();
    return true;
  });
}

}  // namespace troupe::http
