// Parsing JSON that comes from outside (request bodies, KV values any token holder can write)
// with a bound on nesting. nlohmann::json copies, compares and prints values recursively, so a
// body of a few hundred KiB of "[[[[..." would overflow the stack of whatever thread touches it
// and take the daemon down; ParseBoundedJson refuses such input before building anything.
// Stateless; thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace troupe::jobs {

// The deepest nesting of objects and arrays accepted (Ray's and most clients' bodies need < 10).
inline constexpr int kMaxJsonDepth = 64;

// The deepest nesting of '{'/'[' in `text` outside string literals, counting no further than
// `stop_after + 1` (the scan stops there). For valid JSON this is the value's depth; for invalid
// JSON it bounds how deep a parser gets before it finds the error.
int JsonNestingDepth(absl::string_view text, int stop_after);

// The parsed value, or InvalidArgument saying what was wrong: "JSON nested deeper than 64
// levels ..." (checked first, with a linear scan, nothing allocated) or "not valid JSON: <the
// parser's message>". `what` names the input in messages, e.g. "the body".
absl::StatusOr<nlohmann::json> ParseBoundedJson(absl::string_view text, absl::string_view what,
                                                int max_depth = kMaxJsonDepth);

}  // namespace troupe::jobs
