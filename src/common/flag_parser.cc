#include "src/common/flag_parser.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace troupe {
namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string ClosestName(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = 3;  // suggest only close matches
  std::vector<std::string> extending;
  for (const auto& candidate : candidates) {
    if (!name.empty() && absl::StartsWith(candidate, name)) extending.push_back(candidate);
    size_t d = EditDistance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  if (best.empty() && extending.size() == 1) return extending[0];
  return best;
}

int64_t ParseByteCount(const std::string& text) {
  std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t unit_start = 0;
  while (
      unit_start < lower.size() &&
      (std::isdigit(static_cast<unsigned char>(lower[unit_start])) || lower[unit_start] == '.')) {
    ++unit_start;
  }
  double number;
  if (unit_start == 0 || !absl::SimpleAtod(lower.substr(0, unit_start), &number)) return -1;
  std::string unit = lower.substr(unit_start);
  static const std::map<std::string, double> kUnits = {{"", 1},
                                                       {"b", 1},
                                                       {"k", 1024.0},
                                                       {"kb", 1024.0},
                                                       {"kib", 1024.0},
                                                       {"m", 1 << 20},
                                                       {"mb", 1 << 20},
                                                       {"mib", 1 << 20},
                                                       {"g", 1 << 30},
                                                       {"gb", 1 << 30},
                                                       {"gib", 1 << 30},
                                                       {"t", 1099511627776.0},
                                                       {"tb", 1099511627776.0},
                                                       {"tib", 1099511627776.0}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end()) return -1;
  return static_cast<int64_t>(std::llround(number * it->second));
}

FlagParser::FlagParser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void FlagParser::Add(const std::string& name, Flag flag) { flags_[name] = std::move(flag); }

void FlagParser::AddString(const std::string& name, std::string* target, const std::string& help) {
  Add(name, {help, target->empty() ? "" : "\"" + *target + "\"", false,
             [target](const std::string& v) {
               *target = v;
               return true;
             },
             "a string"});
}

void FlagParser::AddInt(const std::string& name, int64_t* target, const std::string& help) {
  Add(name,
      {help, std::to_string(*target), false,
       [target](const std::string& v) { return absl::SimpleAtoi(v, target); }, "a whole number"});
}

void FlagParser::AddDouble(const std::string& name, double* target, const std::string& help) {
  Add(name, {help, absl::StrFormat("%g", *target), false,
             [target](const std::string& v) { return absl::SimpleAtod(v, target); }, "a number"});
}

void FlagParser::AddBool(const std::string& name, bool* target, const std::string& help) {
  Add(name,
      {help, *target ? "true" : "false", true,
       [target](const std::string& v) { return absl::SimpleAtob(v, target); }, "true or false"});
}

void FlagParser::AddBytes(const std::string& name, int64_t* target, const std::string& help) {
  Add(name, {help, std::to_string(*target), false,
             [target](const std::string& v) {
               int64_t bytes = ParseByteCount(v);
               if (bytes < 0) return false;
               *target = bytes;
               return true;
             },
             "a byte count such as 1073741824, 512MiB or 4GiB"});
}

std::string FlagParser::ClosestFlag(const std::string& name) const {
  std::vector<std::string> names;
  for (const auto& [candidate, flag] : flags_) names.push_back(candidate);
  return ClosestName(name, names);
}

absl::Status FlagParser::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional_.insert(positional_.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "-h" || arg == "--help") {
      help_requested_ = true;
      continue;
    }
    if (!absl::StartsWith(arg, "--")) {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) {
      std::string message = absl::StrCat("unknown flag --", name, " for `", command_, "`");
      if (std::string close = ClosestFlag(name); !close.empty()) {
        absl::StrAppend(&message, "; did you mean --", close, "?");
      }
      absl::StrAppend(&message, " (see `", command_, " --help`)");
      return absl::InvalidArgumentError(message);
    }
    const Flag& flag = it->second;
    if (!has_value) {
      if (flag.is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value (", flag.expects, ")"));
      }
    }
    if (!flag.set(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " expects ", flag.expects, ", got '", value, "'"));
    }
    set_flags_[name] = true;
  }
  return absl::OkStatus();
}

std::string FlagParser::Usage() const {
  std::string out = absl::StrCat("Usage: ", command_, " [flags]\n\n", summary_, "\n\nFlags:\n");
  for (const auto& [name, flag] : flags_) {
    absl::StrAppend(&out, "  --", name, "\n      ", flag.help);
    if (!flag.default_text.empty()) absl::StrAppend(&out, " (default: ", flag.default_text, ")");
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "  --help\n      Show this help.\n");
  if (!epilog_.empty()) absl::StrAppend(&out, "\n", epilog_, "\n");
  return out;
}

}  // namespace troupe
