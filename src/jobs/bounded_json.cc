#include "src/jobs/bounded_json.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace troupe::jobs {

int JsonNestingDepth(absl::string_view text, int stop_after) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > stop_after) break;
    } else if (c == '}' || c == ']') {
      --depth;  // may go negative on invalid JSON; the parser refuses that
    }
  }
  return deepest;
}

absl::StatusOr<nlohmann::json> ParseBoundedJson(absl::string_view text, absl::string_view what,
                                                int max_depth) {
  if (JsonNestingDepth(text, max_depth) > max_depth) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is JSON nested deeper than ", max_depth,
        " levels; flatten it (objects and arrays may nest at most ", max_depth, " deep)"));
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not valid JSON: ", e.what()));
  }
}

}  // namespace troupe::jobs
