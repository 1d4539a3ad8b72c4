#include "src/cli/state_format.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace troupe {
namespace {

using nlohmann::json;

// True when a plain scalar would be read back as something else (a number, bool, null), or
// holds characters YAML treats specially.
bool NeedsQuotes(const std::string& text) {
  if (text.empty()) return true;
  static const char* kWords[] = {"true", "false", "null", "yes", "no", "on", "off", "~"};
  for (const char* word : kWords) {
    if (absl::EqualsIgnoreCase(text, word)) return true;
  }
  if (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-' || text[0] == '+' ||
      text[0] == '.' || text[0] == ' ' || text.back() == ' ') {
    return true;
  }
  return text.find_first_of(":#{}[],&*!|>'\"%@`\n\t\\") != std::string::npos;
}

// `text` as a YAML scalar: plain, or double-quoted (JSON strings are valid YAML), or, with control
// characters, double-quoted with YAML's escapes (\xNN, \uNNNN).
std::string YamlText(const std::string& text) {
  if (TerminalSafe(text) != text) {
    std::string quoted;
    for (char c : text) {
      if (c == '\\' || c == '"') quoted += '\\';
      quoted += c;
    }
    return "\"" + TerminalSafe(quoted) + "\"";
  }
  return NeedsQuotes(text) ? json(text).dump() : text;
}

std::string Scalar(const json& value) {
  if (value.is_null()) return "null";
  if (!value.is_string()) return value.dump();
  return YamlText(value.get<std::string>());
}

void Yaml(const json& value, int indent, std::string* out) {
  const std::string pad(indent, ' ');
  if (value.is_object()) {
    if (value.empty()) return out->append(pad + "{}\n"), void();
    for (const auto& [key, item] : value.items()) {
      const std::string k = YamlText(key);
      if (item.is_structured() && !item.empty()) {
        absl::StrAppend(out, pad, k, ":\n");
        Yaml(item, indent + 2, out);
      } else if (item.is_structured()) {
        absl::StrAppend(out, pad, k, item.is_array() ? ": []\n" : ": {}\n");
      } else {
        absl::StrAppend(out, pad, k, ": ", Scalar(item), "\n");
      }
    }
  } else if (value.is_array()) {
    if (value.empty()) return out->append(pad + "[]\n"), void();
    for (const auto& item : value) {
      if (item.is_structured() && !item.empty()) {
        // "- " then the item's first line; the rest indented under it.
        std::string nested;
        Yaml(item, indent + 2, &nested);
        nested.replace(indent, 2, "- ");
        out->append(nested);
      } else {
        absl::StrAppend(out, pad, "- ",
                        item.is_structured() ? (item.is_array() ? "[]" : "{}") : Scalar(item),
                        "\n");
      }
    }
  } else {
    absl::StrAppend(out, pad, Scalar(value), "\n");
  }
}

}  // namespace

std::string TerminalSafe(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  auto continuation = [&](size_t i) { return i < text.size() && (byte(i) & 0xC0) == 0x80; };
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = byte(i);
    if (c < 0x80) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c < 0x20 || c == 0x7F) {
        absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    const size_t length = c >= 0xC2 && c <= 0xDF   ? 2
                          : c >= 0xE0 && c <= 0xEF ? 3
                          : c >= 0xF0 && c <= 0xF4 ? 4
                                                   : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) valid = continuation(i + k);
    if (!valid) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
      ++i;
    } else if (c == 0xC2 && byte(i + 1) <= 0x9F) {  // U+0080..U+009F: C1 controls
      absl::StrAppend(&out, "\\u00", absl::Hex(byte(i + 1), absl::kZeroPad2));
      i += 2;
    } else {
      out.append(text.data() + i, length);
      i += length;
    }
  }
  return out;
}

std::string CellText(const json& value) {
  if (value.is_null()) return "";
  if (value.is_string()) return value.get<std::string>();
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string FormatTable(const std::vector<std::string>& columns, const json& rows) {
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> widths;
  std::vector<std::string> header;
  for (const auto& column : columns) {
    header.push_back(absl::AsciiStrToUpper(column));
    widths.push_back(header.back().size());
  }
  cells.push_back(header);
  for (const auto& row : rows) {
    std::vector<std::string> line;
    for (size_t i = 0; i < columns.size(); ++i) {
      line.push_back(row.contains(columns[i]) ? TerminalSafe(CellText(row[columns[i]])) : "");
      widths[i] = std::max(widths[i], line.back().size());
    }
    cells.push_back(std::move(line));
  }
  std::string out;
  for (const auto& line : cells) {
    std::string text;
    for (size_t i = 0; i < line.size(); ++i) {
      text += line[i];
      if (i + 1 < line.size()) text += std::string(widths[i] - line[i].size() + 2, ' ');
    }
    text.erase(text.find_last_not_of(' ') + 1);  // empty last cells leave no trailing blanks
    out += text + "\n";
  }
  return out;
}

std::string FormatYaml(const json& value) {
  std::string out;
  Yaml(value, 0, &out);
  return out;
}

absl::StatusOr<Filter> ParseFilter(const std::string& text) {
  Filter filter;
  size_t at = text.find("!=");
  size_t skip = 2;
  if (at == std::string::npos) {
    at = text.find('=');
    skip = 1;
  } else {
    filter.negate = true;
  }
  if (at == std::string::npos || at == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--filter wants KEY=VALUE or KEY!=VALUE, got '", text, "'"));
  }
  filter.key = text.substr(0, at);
  filter.value = text.substr(at + skip);
  return filter;
}

bool Matches(const json& row, const std::vector<Filter>& filters) {
  for (const auto& filter : filters) {
    const bool has = row.is_object() && row.contains(filter.key);
    const bool equal = has && absl::EqualsIgnoreCase(CellText(row[filter.key]), filter.value);
    if (equal == filter.negate) return false;
  }
  return true;
}

}  // namespace troupe
