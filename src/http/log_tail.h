// GET /api/jobs/<id>/logs/tail[?offset=N]: a job's output while it grows, from byte N of its log
// (0 by default), ending once the job has ended and everything was sent. Two shapes on one path:
//   - a WebSocket (what Ray's JobSubmissionClient.tail_job_logs, `ray job submit` and
//     `ray job logs -f` open, and `troupe job logs --follow`): one text frame per piece of new
//     output, then a normal close. Frames are valid UTF-8: a multi-byte character split between
//     two reads waits for its end, and bytes that are not UTF-8 become U+FFFD (so byte offsets
//     count the log's bytes, which equal the frames' bytes when the output is UTF-8);
//   - without an upgrade, chunked text/plain with the raw bytes (`curl .../logs/tail`).
// Each piece is one JobService::WaitForLogs step: a long poll of the job's supervisor, which
// answers as soon as output arrives. Thread-safe as JobService is; runs on the connection thread.
#pragma once

#include <string>
#include <string_view>

#include "src/http/router.h"
#include "src/jobs/job_service.h"

namespace troupe::http {

// The chunked plain-text tail; 404 (JSON) for an unknown job, 400 for a bad offset. `jobs` must
// outlive the response.
HttpResponse LogTailStream(jobs::JobService* jobs, const HttpRequest& request);

// The WebSocket tail (same checks before the upgrade). `jobs` must outlive the route.
WebSocketRoute LogTailWebSocket(jobs::JobService* jobs);

// How many leading bytes of `bytes` can go out now: all but an incomplete UTF-8 sequence at the
// end (at most 3 bytes, kept for the next frame).
size_t CompleteUtf8Prefix(std::string_view bytes);
// `bytes` with every byte that is not part of valid UTF-8 replaced by U+FFFD.
std::string ValidUtf8(std::string_view bytes);

}  // namespace troupe::http
