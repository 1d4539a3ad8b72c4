// Early-return helpers for absl::Status / absl::StatusOr (Debian's Abseil 20220623 has none).
// Header-only; no state.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TROUPE_CONCAT_INNER_(a, b) a##b
#define TROUPE_CONCAT_(a, b) TROUPE_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define TROUPE_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status troupe_status_ = (expr);          \
    if (!troupe_status_.ok()) return troupe_status_; \
  } while (0)

// `TROUPE_ASSIGN_OR_RETURN(auto x, MaybeX());` declares x from an OK StatusOr or returns its
// status.
#define TROUPE_ASSIGN_OR_RETURN(lhs, expr) \
  TROUPE_ASSIGN_OR_RETURN_IMPL_(TROUPE_CONCAT_(troupe_statusor_, __LINE__), lhs, expr)
#define TROUPE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(*tmp)
