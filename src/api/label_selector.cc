// troupe::LabelSelector (troupe/label_selector.h): building and checking selectors.
#include "troupe/label_selector.h"

#include <cctype>
#include <string>
#include <utility>

#include "troupe/errors.h"

namespace troupe {
namespace {

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// Kubernetes' "name" part: 1-63 of [A-Za-z0-9-_.], beginning and ending alphanumeric.
std::string NameProblem(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name.size() > 63) return "is longer than 63 characters";
  for (char c : name) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') {
      return std::string("has the character '") + c + "' (allowed: letters, digits, '-', '_', '.')";
    }
  }
  if (!IsAlnum(name.front()) || !IsAlnum(name.back())) {
    return "must begin and end with a letter or digit";
  }
  return "";
}

// "[prefix/]name", the prefix a DNS subdomain of at most 253 characters.
std::string KeyProblem(const std::string& key) {
  const size_t slash = key.find('/');
  if (slash == std::string::npos) return NameProblem(key);
  const std::string prefix = key.substr(0, slash);
  if (prefix.empty() || prefix.size() > 253)
    return "has a prefix (before '/') of 0 or >253 characters";
  for (char c : prefix) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.')) {
      return "has a prefix (before '/') that is not a DNS subdomain (lowercase letters, digits, "
             "'-', '.')";
    }
  }
  std::string problem = NameProblem(key.substr(slash + 1));
  return problem.empty() ? "" : "has a name (after '/') that " + problem;
}

[[noreturn]] void ThrowBad(const char* op, const std::string& what) {
  throw InvalidArgumentError(std::string("LabelSelector::") + op + ": " + what +
                             " (label keys and values follow Kubernetes' syntax; see "
                             "docs/api.md, \"Label scheduling\")");
}

const char* OpName(internal::LabelConstraint::Op op) {
  switch (op) {
    case internal::LabelConstraint::Op::kEquals:
      return "Equals";
    case internal::LabelConstraint::Op::kIn:
      return "In";
    case internal::LabelConstraint::Op::kNotIn:
      return "NotIn";
    case internal::LabelConstraint::Op::kExists:
      return "Exists";
    case internal::LabelConstraint::Op::kDoesNotExist:
      return "DoesNotExist";
  }
  return "?";
}

}  // namespace

LabelSelector& LabelSelector::Add(internal::LabelConstraint::Op op, const std::string& key,
                                  std::vector<std::string> values) {
  const char* name = OpName(op);
  if (std::string problem = KeyProblem(key); !problem.empty()) {
    ThrowBad(name, "the key '" + key + "' " + problem);
  }
  const bool listed =
      op == internal::LabelConstraint::Op::kIn || op == internal::LabelConstraint::Op::kNotIn;
  if (listed && values.empty()) {
    ThrowBad(name, "the list of values for '" + key +
                       "' is empty; give at least one (Exists/DoesNotExist test the key alone)");
  }
  for (const std::string& value : values) {
    if (std::string problem = NameProblem(value); !problem.empty()) {
      ThrowBad(name, "the value '" + value + "' for '" + key + "' " + problem);
    }
  }
  constraints_.push_back({op, key, std::move(values)});
  return *this;
}

LabelSelector& LabelSelector::Equals(const std::string& key, const std::string& value) {
  return Add(internal::LabelConstraint::Op::kEquals, key, {value});
}
LabelSelector& LabelSelector::In(const std::string& key, const std::vector<std::string>& values) {
  return Add(internal::LabelConstraint::Op::kIn, key, values);
}
LabelSelector& LabelSelector::NotIn(const std::string& key,
                                    const std::vector<std::string>& values) {
  return Add(internal::LabelConstraint::Op::kNotIn, key, values);
}
LabelSelector& LabelSelector::Exists(const std::string& key) {
  return Add(internal::LabelConstraint::Op::kExists, key, {});
}
LabelSelector& LabelSelector::DoesNotExist(const std::string& key) {
  return Add(internal::LabelConstraint::Op::kDoesNotExist, key, {});
}

std::string LabelSelector::ToString() const {
  std::string out = "{";
  for (size_t i = 0; i < constraints_.size(); ++i) {
    const internal::LabelConstraint& c = constraints_[i];
    std::string values;
    for (size_t v = 0; v < c.values.size(); ++v) values += (v ? "," : "") + c.values[v];
    if (i > 0) out += ", ";
    switch (c.op) {
      case internal::LabelConstraint::Op::kEquals:
        out += c.key + "=" + values;
        break;
      case internal::LabelConstraint::Op::kIn:
        out += c.key + " in (" + values + ")";
        break;
      case internal::LabelConstraint::Op::kNotIn:
        out += c.key + " notin (" + values + ")";
        break;
      case internal::LabelConstraint::Op::kExists:
        out += c.key;
        break;
      case internal::LabelConstraint::Op::kDoesNotExist:
        out += "!" + c.key;
        break;
    }
  }
  return out + "}";
}

}  // namespace troupe
