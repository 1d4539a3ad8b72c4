#include "src/common/resources.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace troupe {

FixedPoint::FixedPoint(double value) : raw_(std::llround(value * kScale)) {}

absl::StatusOr<ResourceSet> ResourceSet::FromMap(const std::map<std::string, double>& amounts) {
  ResourceSet set;
  for (const auto& [name, value] : amounts) {
    if (name.empty()) return absl::InvalidArgumentError("resource name must not be empty");
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("resource '", name, "' has quantity ", value, "; it must be >= 0"));
    }
    set.Set(name, FixedPoint(value));
  }
  return set;
}

absl::Status CheckResourceDemand(const std::string& field,
                                 const std::map<std::string, double>& demand) {
  constexpr double kMaxAmount = 1e14;  // far above any node, far below fixed-point overflow
  for (const auto& [name, amount] : demand) {
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " has a resource with an empty name (amount ", amount,
                       "); name every resource, e.g. {\"CPU\", 1}"));
    }
    const std::string what = absl::StrCat(field, "['", name, "'] is ", amount);
    if (!std::isfinite(amount) || amount < 0 || amount > kMaxAmount) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "; an amount must be a finite number from 0 to ", kMaxAmount));
    }
    if (amount > 0 && FixedPoint(amount).raw() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "; amounts are counted in steps of 0.0001, so this would ask for nothing"));
    }
    if (name == kGpu && amount > 1 && FixedPoint(amount).raw() % FixedPoint::kScale != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what,
                       "; more than one GPU must be a whole number of GPUs (a fraction such as 0.5 "
                       "shares one device)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ResourceSet> ResourceSet::FromJson(const std::string& json) {
  nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resources must be a JSON object of name to number, like '{\"accel\": 2}'; got '", json,
        "'"));
  }
  std::map<std::string, double> amounts;
  for (const auto& [name, value] : parsed.items()) {
    if (!value.is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("resource '", name, "' must be a number, got ", value.dump()));
    }
    amounts[name] = value.get<double>();
  }
  return FromMap(amounts);
}

void ResourceSet::Set(const std::string& name, FixedPoint amount) {
  if (amount.raw() <= 0) {
    amounts_.erase(name);
  } else {
    amounts_[name] = amount;
  }
}

FixedPoint ResourceSet::Get(const std::string& name) const {
  auto it = amounts_.find(name);
  return it == amounts_.end() ? FixedPoint() : it->second;
}

bool ResourceSet::IsSubsetOf(const ResourceSet& other) const {
  for (const auto& [name, amount] : amounts_) {
    if (amount > other.Get(name)) return false;
  }
  return true;
}

ResourceSet& ResourceSet::operator+=(const ResourceSet& other) {
  for (const auto& [name, amount] : other.amounts_) Set(name, Get(name) + amount);
  return *this;
}

ResourceSet& ResourceSet::operator-=(const ResourceSet& other) {
  for (const auto& [name, amount] : other.amounts_) Set(name, Get(name) - amount);
  return *this;
}

std::map<std::string, double> ResourceSet::ToMap() const {
  std::map<std::string, double> out;
  for (const auto& [name, amount] : amounts_) out[name] = amount.ToDouble();
  return out;
}

std::string ResourceSet::ToString() const {
  return absl::StrJoin(amounts_, ", ", [](std::string* out, const auto& entry) {
    absl::StrAppend(out, entry.first, ": ", FormatQuantity(entry.first, entry.second.ToDouble()));
  });
}

bool IsByteResource(const std::string& name) {
  return name == kMemory || name == kObjectStoreMemory;
}

std::string FormatBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%.0f%s", bytes, kUnits[unit]);
  return absl::StrFormat("%.2f%s", bytes, kUnits[unit]);
}

std::string FormatQuantity(const std::string& name, double value) {
  if (IsByteResource(name)) return FormatBytes(value);
  return absl::StrFormat("%g", value);
}

}  // namespace troupe
