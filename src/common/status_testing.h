// gtest assertions for absl::Status and absl::StatusOr (Debian's GoogleTest and Abseil 20220623
// ship none). Header-only; no state.
//   ASSERT_OK(cluster.AddWorker());                 // Status or StatusOr; stops the test if not OK
//   EXPECT_OK(store.Put(...));
//   ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
// Like every ASSERT_*, these return from the enclosing void function on failure: use them in the
// TEST body (or SetUp), not in helpers whose caller would carry on.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "src/common/status_macros.h"

namespace troupe::status_testing {

inline const absl::Status& StatusOf(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// gtest predicate-formatter: OK, or a failure naming the expression and the status.
template <typename StatusOrStatus>
::testing::AssertionResult IsOk(const char* expression, const StatusOrStatus& value) {
  const absl::Status& status = StatusOf(value);
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expression << " failed: " << status;
}

}  // namespace troupe::status_testing

#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::troupe::status_testing::IsOk, expr)
#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::troupe::status_testing::IsOk, expr)

// `ASSERT_OK_AND_ASSIGN(auto x, MaybeX());` declares x from an OK StatusOr, or fails the test
// (fatally) with the expression and its status.
#define ASSERT_OK_AND_ASSIGN(lhs, ...) \
  TROUPE_ASSERT_OK_AND_ASSIGN_IMPL_(TROUPE_CONCAT_(troupe_asserted_, __LINE__), lhs, (__VA_ARGS__))
#define TROUPE_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr)                                   \
  auto tmp = (expr);                                                                        \
  ASSERT_TRUE(tmp.ok()) << #expr << " failed: " << ::troupe::status_testing::StatusOf(tmp); \
  lhs = std::move(*tmp)
