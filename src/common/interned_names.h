// A table of names (function names of tasks, mostly) stored once each, so a record that names
// one holds a pointer instead of its own heap copy: task events record the same few names at
// tens of thousands of calls a second. Bounded: once `max_names` distinct names are stored,
// Intern answers nullptr for a new one and the caller keeps its own copy. Pointers stay valid
// for the table's life (names are never removed).
// Thread-compatible: the owner serializes calls (both users call it under their own mutex).
#pragma once

#include <cstddef>
#include <string>

#include "absl/container/node_hash_set.h"
#include "absl/strings/string_view.h"

namespace troupe {

class InternedNames {
 public:
  explicit InternedNames(size_t max_names) : max_names_(max_names) {}

  // The stored copy of `name` (stored now if new and there is room); nullptr when the table is
  // full and `name` is not in it.
  const std::string* Intern(absl::string_view name) {
    auto it = names_.find(name);
    if (it != names_.end()) return &*it;
    if (names_.size() >= max_names_) return nullptr;
    return &*names_.emplace(name).first;
  }
  size_t size() const { return names_.size(); }

 private:
  const size_t max_names_;
  absl::node_hash_set<std::string> names_;
};

// A name held either in an InternedNames table or, when that was full, in its own string.
class NameRef {
 public:
  NameRef() = default;
  NameRef(InternedNames& table, absl::string_view name) {
    if (name.empty()) return;
    interned_ = table.Intern(name);
    if (interned_ == nullptr) own_ = std::string(name);
  }
  absl::string_view view() const { return interned_ != nullptr ? *interned_ : own_; }
  bool empty() const { return interned_ == nullptr && own_.empty(); }

 private:
  const std::string* interned_ = nullptr;
  std::string own_;
};

}  // namespace troupe
