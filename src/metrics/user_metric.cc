#include "src/metrics/user_metric.h"

#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troupe::metrics {
namespace {

constexpr size_t kMaxNameLength = 200;
constexpr size_t kMaxTextLength = 1000;
constexpr int kMaxTagKeys = 20;

bool IsNameChar(char c, bool first, bool colon_allowed) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (c == ':') return colon_allowed;
  return !first && c >= '0' && c <= '9';
}

bool IsValidName(const std::string& name, bool colon_allowed) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, colon_allowed)) return false;
  }
  return true;
}

}  // namespace

const char* KindName(rpc::UserMetricDefinition::Kind kind) {
  switch (kind) {
    case rpc::UserMetricDefinition::COUNTER:
      return "counter";
    case rpc::UserMetricDefinition::GAUGE:
      return "gauge";
    case rpc::UserMetricDefinition::HISTOGRAM:
      return "histogram";
    default:
      return "unknown";
  }
}

absl::Status ValidateDefinition(const rpc::UserMetricDefinition& d) {
  const std::string what = absl::StrCat("metric \"", d.name(), "\"");
  if (!IsValidName(d.name(), /*colon_allowed=*/true) || d.name().size() > kMaxNameLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid ", what,
        ": a metric name is 1 to 200 of [a-zA-Z0-9_:], not starting with a digit (Prometheus' "
        "rule), e.g. \"requests_served_total\""));
  }
  if (absl::StartsWith(d.name(), "troupe_") || absl::StartsWith(d.name(), "__")) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid ", what,
                     ": names starting with \"troupe_\" or \"__\" are reserved for Troupe's "
                     "own metrics; pick another prefix"));
  }
  if (d.kind() != rpc::UserMetricDefinition::COUNTER &&
      d.kind() != rpc::UserMetricDefinition::GAUGE &&
      d.kind() != rpc::UserMetricDefinition::HISTOGRAM) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid ", what, ": unknown kind ", static_cast<int>(d.kind())));
  }
  if (d.description().size() > kMaxTextLength || d.unit().size() > kMaxTextLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid ", what, ": description and unit are at most 1000 characters"));
  }
  if (d.tag_keys_size() > kMaxTagKeys) {
    return absl::InvalidArgumentError(absl::StrCat("invalid ", what, ": ", d.tag_keys_size(),
                                                   " tag keys; at most ", kMaxTagKeys));
  }
  std::set<std::string> seen;
  for (const std::string& key : d.tag_keys()) {
    if (!IsValidName(key, /*colon_allowed=*/false) || key.size() > kMaxNameLength ||
        absl::StartsWith(key, "__")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid tag key \"", key, "\" of ", what,
          ": a tag key is 1 to 200 of [a-zA-Z0-9_], not starting with a digit nor \"__\""));
    }
    if (key == "le" && d.kind() == rpc::UserMetricDefinition::HISTOGRAM) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid tag key \"le\" of ", what, ": Prometheus uses \"le\" for histogram buckets"));
    }
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid ", what, ": tag key \"", key, "\" is given twice"));
    }
  }
  if (d.kind() == rpc::UserMetricDefinition::HISTOGRAM) {
    if (d.boundaries().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid ", what,
                       ": a histogram needs at least one bucket boundary, e.g. {0.01, 0.1, 1}"));
    }
    for (int i = 0; i < d.boundaries_size(); ++i) {
      if (!std::isfinite(d.boundaries(i)) || (i > 0 && d.boundaries(i) <= d.boundaries(i - 1))) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid ", what,
                         ": histogram boundaries must be finite and strictly "
                         "increasing; got {",
                         absl::StrJoin(d.boundaries(), ", "), "}"));
      }
    }
  } else if (!d.boundaries().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid ", what, ": only a histogram has boundaries"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRecord(const rpc::UserMetricDefinition& d, double value, const Tags& tags) {
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot record ", value, " on ", Describe(d), ": the value must be finite"));
  }
  if (d.kind() == rpc::UserMetricDefinition::COUNTER && value < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot add ", value, " to ", Describe(d),
                                                   ": a counter only goes up (use a Gauge)"));
  }
  for (const auto& [key, tag_value] : tags) {
    bool declared = false;
    for (const std::string& k : d.tag_keys()) declared |= k == key;
    if (!declared) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown tag key \"", key, "\" recorded on ", Describe(d),
                       ": declare every tag key when constructing the metric"));
    }
    if (tag_value.size() > kMaxTextLength) {
      return absl::InvalidArgumentError(absl::StrCat("the value of tag \"", key, "\" on ",
                                                     Describe(d), " is ", tag_value.size(),
                                                     " bytes; at most 1000"));
    }
  }
  for (const std::string& key : d.tag_keys()) {
    if (tags.find(key) == tags.end()) {
      return absl::InvalidArgumentError(absl::StrCat("missing tag \"", key, "\" recorded on ",
                                                     Describe(d),
                                                     ": give a value for every tag key"));
    }
  }
  return absl::OkStatus();
}

bool SameDefinition(const rpc::UserMetricDefinition& a, const rpc::UserMetricDefinition& b) {
  if (a.kind() != b.kind() || a.name() != b.name() || a.description() != b.description() ||
      a.unit() != b.unit() || a.boundaries_size() != b.boundaries_size() ||
      a.tag_keys_size() != b.tag_keys_size()) {
    return false;
  }
  for (int i = 0; i < a.boundaries_size(); ++i) {
    if (a.boundaries(i) != b.boundaries(i)) return false;
  }
  for (int i = 0; i < a.tag_keys_size(); ++i) {
    if (a.tag_keys(i) != b.tag_keys(i)) return false;
  }
  return true;
}

std::string Describe(const rpc::UserMetricDefinition& d) {
  std::string text = absl::StrCat(KindName(d.kind()), " \"", d.name(), "\"");
  if (d.kind() == rpc::UserMetricDefinition::HISTOGRAM) {
    absl::StrAppend(&text, " (boundaries {", absl::StrJoin(d.boundaries(), ", "), "})");
  }
  absl::StrAppend(&text,
                  d.tag_keys().empty()
                      ? " (no tags)"
                      : absl::StrCat(" (tag keys: ", absl::StrJoin(d.tag_keys(), ", "), ")"));
  return text;
}

}  // namespace troupe::metrics
