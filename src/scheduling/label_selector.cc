#include "src/scheduling/label_selector.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troupe {
namespace {

constexpr int kMaxConstraints = 64;
constexpr int kMaxValues = 256;
constexpr size_t kMaxLabelBytes = 256;

template <typename Labels>
bool Matches(const rpc::LabelSelector& selector, const Labels& labels) {
  for (const auto& constraint : selector.constraints()) {
    auto it = labels.find(constraint.key());
    const bool present = it != labels.end();
    const auto& values = constraint.values();
    const bool listed =
        present && std::find(values.begin(), values.end(), it->second) != values.end();
    bool holds = false;
    switch (constraint.op()) {
      case rpc::LabelConstraint::EQUALS:
      case rpc::LabelConstraint::IN:
        holds = listed;
        break;
      case rpc::LabelConstraint::NOT_IN:
        holds = !listed;
        break;
      case rpc::LabelConstraint::EXISTS:
        holds = present;
        break;
      case rpc::LabelConstraint::DOES_NOT_EXIST:
        holds = !present;
        break;
      default:
        holds = false;
    }
    if (!holds) return false;
  }
  return true;
}

std::string FormatConstraint(const rpc::LabelConstraint& constraint) {
  const std::string values = absl::StrJoin(constraint.values(), ",");
  switch (constraint.op()) {
    case rpc::LabelConstraint::EQUALS:
      return absl::StrCat(constraint.key(), "=", values);
    case rpc::LabelConstraint::IN:
      return absl::StrCat(constraint.key(), " in (", values, ")");
    case rpc::LabelConstraint::NOT_IN:
      return absl::StrCat(constraint.key(), " notin (", values, ")");
    case rpc::LabelConstraint::EXISTS:
      return constraint.key();
    case rpc::LabelConstraint::DOES_NOT_EXIST:
      return absl::StrCat("!", constraint.key());
    default:
      return absl::StrCat(constraint.key(), " <operator ", constraint.op(), ">");
  }
}

}  // namespace

bool MatchesLabels(const rpc::LabelSelector& selector,
                   const google::protobuf::Map<std::string, std::string>& labels) {
  return Matches(selector, labels);
}

bool MatchesLabels(const rpc::LabelSelector& selector,
                   const std::map<std::string, std::string>& labels) {
  return Matches(selector, labels);
}

std::string FormatLabelSelector(const rpc::LabelSelector& selector) {
  if (selector.constraints().empty()) return "";
  std::vector<std::string> parts;
  for (const auto& constraint : selector.constraints())
    parts.push_back(FormatConstraint(constraint));
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}", selector.soft() ? " (soft)" : "");
}

std::string FormatLabels(const std::map<std::string, std::string>& labels) {
  return absl::StrCat("{", absl::StrJoin(labels, ", ", absl::PairFormatter("=")), "}");
}

absl::Status ValidateLabelSelector(const std::string& field, const rpc::LabelSelector& selector) {
  if (selector.constraints_size() > kMaxConstraints) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", selector.constraints_size(),
                                                   " constraints; at most ", kMaxConstraints));
  }
  for (int i = 0; i < selector.constraints_size(); ++i) {
    const rpc::LabelConstraint& constraint = selector.constraints(i);
    const std::string where = absl::StrCat(field, ".constraints[", i, "]");
    if (!rpc::LabelConstraint::Operator_IsValid(constraint.op())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": operator ", constraint.op(),
                       " is unknown; allowed: EQUALS, IN, NOT_IN, EXISTS, DOES_NOT_EXIST"));
    }
    if (constraint.key().empty() || constraint.key().size() > kMaxLabelBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the key must have 1 to ", kMaxLabelBytes, " bytes"));
    }
    const int n = constraint.values_size();
    const bool ok = constraint.op() == rpc::LabelConstraint::EQUALS ? n == 1
                    : constraint.op() == rpc::LabelConstraint::IN ||
                            constraint.op() == rpc::LabelConstraint::NOT_IN
                        ? n >= 1 && n <= kMaxValues
                        : n == 0;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " (", FormatConstraint(constraint), ") has ", n,
                       " values; EQUALS takes 1, IN and NOT_IN 1 to ", kMaxValues,
                       ", EXISTS and DOES_NOT_EXIST none"));
    }
    for (const auto& value : constraint.values()) {
      if (value.size() > kMaxLabelBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": a value has more than ", kMaxLabelBytes, " bytes"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace troupe
