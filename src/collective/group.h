// One member's view of a collective group: its backend, and the order operations run in.
//
// Operations run one at a time in call order: a synchronous call runs on the caller's thread
// when nothing is queued; asynchronous calls queue for the group's thread. The first failure
// breaks the group for good: the backend aborts (peers fail too) and every later operation
// fails at once with the same cause, until the group is destroyed and created again.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "src/collective/backend.h"
#include "troupe/collective.h"

namespace troupe::collective {

class Group {
 public:
  using Operation = std::function<absl::Status(CommBackend& backend, const OpContext& ctx)>;

  // `generation` and `elastic` describe a declared group's declaration (collective.h,
  // internal::DeclareGroup); 0 and false for groups made by InitGroup.
  Group(std::string name, int rank, int world_size, GroupOptions options, std::string incarnation,
        std::unique_ptr<CommBackend> backend, int64_t generation = 0, bool elastic = false);
  // Leaves the group: queued operations fail; peers' pending operations fail.
  ~Group();

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // "" for groups made by InitGroup; the declaration's incarnation for CreateGroup ones.
  const std::string& incarnation() const { return incarnation_; }
  int64_t generation() const { return generation_; }
  // Moves to a newer generation only through RefreshGroup (see internal::DeclareGroup).
  bool elastic() const { return elastic_; }
  bool broken() const;
  // The backend's verdict on a buffer for `call` (CommBackend::CheckBuffer); any thread.
  absl::Status CheckBuffer(const void* data, const std::string& call) const {
    return backend_->CheckBuffer(data, call);
  }

  // Runs `operation` after those called before it; throws CollectiveError on failure.
  void Run(OpCode op, const CallOptions& call, Operation operation);
  Work Start(OpCode op, const CallOptions& call, Operation operation);

 private:
  struct Pending {
    OpCode op;
    CallOptions call;
    Operation operation;
    std::shared_ptr<internal::WorkState> state;
  };
  absl::Status Execute(Pending& pending);
  void Finish(Pending& pending, const absl::Status& status);
  void Loop();

  const std::string name_;
  const int rank_, world_size_;
  const GroupOptions options_;
  const std::string incarnation_;
  std::unique_ptr<CommBackend> backend_;
  const int64_t generation_;
  const bool elastic_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool busy_ = false;  // an operation is executing (on some thread)
  bool stopping_ = false;
  // Touched only by the thread holding `busy_`.
  uint32_t next_seq_ = 0;
  absl::Status broken_;
  std::string broken_by_;  // "allreduce #12"
  std::thread thread_;
};

// Throws the CollectiveError for a failed operation's status.
[[noreturn]] void ThrowCollectiveError(const std::string& group, const char* op,
                                       const absl::Status& status);

}  // namespace troupe::collective
