// How the state commands (`troupe list|get|summary|memory`) print rows of the head's JSON: an
// aligned table whose columns widen to the longest value, a simple hand-written YAML, and the
// --filter k=v / k!=v matching. Pure functions over nlohmann::json; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace troupe {

// `text` made safe to print on a terminal: control characters (C0, DEL, and C1 in UTF-8) and
// bytes that are not UTF-8 become visible escapes (\n, \t, \r, \x1b, \u009b), so a name cannot
// move the cursor, recolour or retitle the user's terminal. Printable text (UTF-8 included)
// passes unchanged; a backslash stays as it is.
std::string TerminalSafe(absl::string_view text);

// A value as one table cell or filter operand: strings as they are, null as "", the rest as
// compact JSON.
std::string CellText(const nlohmann::json& value);

// `rows` (objects) as a table: a header of `columns` upper-cased, then one line per row; each
// column as wide as its widest cell, two spaces apart; the last column is not padded. Cells are
// TerminalSafe.
std::string FormatTable(const std::vector<std::string>& columns, const nlohmann::json& rows);

// `value` as YAML (block style; strings quoted when YAML would misread them, and with YAML's
// escapes when they hold control characters). A top-level array of objects becomes a list of
// mappings.
std::string FormatYaml(const nlohmann::json& value);

struct Filter {
  std::string key;
  std::string value;
  bool negate = false;  // k!=v
};
// "k=v" or "k!=v"; InvalidArgument otherwise.
absl::StatusOr<Filter> ParseFilter(const std::string& text);
// True when every filter holds for `row`: its key's cell equals the value (ASCII case-insensitive),
// or differs for k!=v. A row without the key matches only k!=v filters.
bool Matches(const nlohmann::json& row, const std::vector<Filter>& filters);

}  // namespace troupe
