// The CLI's client of the head's WebSocket log tail (GET /api/jobs/<id>/logs/tail, upgraded;
// src/http/log_tail.h), on Boost.Beast: over TLS with the cluster CA when the API is https://,
// with the cluster token on the upgrade request. Used by `troupe job logs --follow` and
// `troupe job submit` (waiting). Blocks the calling thread; no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "src/cli/http_api.h"

namespace troupe {

// Streams job `id`'s log from byte `*offset` on, calling `on_text` for each text frame and
// advancing `*offset` by its bytes (so a retry resumes where this one stopped). OK once the server
// closed the stream normally (the job ended and all was sent); Unavailable if the connection
// failed or dropped (retrying resumes); another code (with the server's message) if the server
// refused the upgrade (unknown job: NotFound; bad token: Unauthenticated).
absl::Status FollowJobLog(const ApiTarget& api, const std::string& id, int64_t* offset,
                          const std::function<void(std::string_view)>& on_text);

}  // namespace troupe
