// TestBackend: a CommBackend for tests that script one or two operations (StagingBackend's tests
// put it under the staging to watch copies and results). Every operation a test does not
// override fails with an error naming it, so a test that reaches one by mistake says which.
// Not thread-safe beyond what the overriding test adds; owned by the test.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "src/collective/backend.h"

namespace troupe::collective {

class TestBackend : public CommBackend {
 public:
  absl::Status AllReduce(void*, size_t, DataType, ReduceOp, const OpContext&) override {
    return NotScripted("AllReduce");
  }
  absl::Status AllGather(const void*, void*, size_t, DataType, const OpContext&) override {
    return NotScripted("AllGather");
  }
  absl::Status ReduceScatter(const void*, void*, size_t, DataType, ReduceOp,
                             const OpContext&) override {
    return NotScripted("ReduceScatter");
  }
  absl::Status Broadcast(void*, size_t, DataType, int, const OpContext&) override {
    return NotScripted("Broadcast");
  }
  absl::Status Reduce(void*, size_t, DataType, ReduceOp, int, const OpContext&) override {
    return NotScripted("Reduce");
  }
  absl::Status Barrier(const OpContext&) override { return absl::OkStatus(); }
  absl::Status Send(const void*, size_t, DataType, int, const OpContext&) override {
    return NotScripted("Send");
  }
  absl::Status Recv(void*, size_t, DataType, int, const OpContext&) override {
    return NotScripted("Recv");
  }
  void Abort(const absl::Status&) override {}

 private:
  static absl::Status NotScripted(const std::string& op) {
    return absl::UnimplementedError(op + " is not scripted by this test's backend");
  }
};

}  // namespace troupe::collective
