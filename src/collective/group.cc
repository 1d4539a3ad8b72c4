#include "src/collective/group.h"

#include "absl/strings/str_cat.h"

namespace troupe::collective {

void ThrowCollectiveError(const std::string& group, const char* op, const absl::Status& status) {
  throw CollectiveError(std::string(status.message()), group, op, PeerOf(status));
}

Group::Group(std::string name, int rank, int world_size, GroupOptions options,
             std::string incarnation, std::unique_ptr<CommBackend> backend, int64_t generation,
             bool elastic)
    : name_(std::move(name)),
      rank_(rank),
      world_size_(world_size),
      options_(options),
      incarnation_(std::move(incarnation)),
      backend_(std::move(backend)),
      generation_(generation),
      elastic_(elastic),
      thread_([this] { Loop(); }) {}

Group::~Group() {
  // Abort first: an operation running on another thread fails promptly instead of timing out.
  backend_->Abort(PeerError(absl::StatusCode::kCancelled, rank_,
                            absl::StrCat("rank ", rank_, " left the group (DestroyGroup)")));
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

bool Group::broken() const {
  std::unique_lock<std::mutex> lock(mu_);
  return !busy_ && !broken_.ok();
}

absl::Status Group::Execute(Pending& pending) {
  const char* op_name = OpName(pending.op);
  if (!broken_.ok()) {
    return PeerError(
        broken_.code(), PeerOf(broken_),
        absl::StrCat("collective group '", name_, "' ", op_name, ": the group is broken since ",
                     broken_by_, " failed (", broken_.message(), "); DestroyGroup(\"", name_,
                     "\") and create it again"));
  }
  OpContext ctx;
  ctx.op = pending.op;
  ctx.seq = pending.op == OpCode::kSendRecv ? 0 : next_seq_++;
  ctx.timeout = pending.call.timeout.count() > 0 ? absl::Milliseconds(pending.call.timeout.count())
                                                 : absl::Milliseconds(options_.timeout.count());
  ctx.deadline = absl::Now() + ctx.timeout;
  ctx.cuda_stream = pending.call.cuda_stream;
  absl::Status status = pending.operation(*backend_, ctx);
  if (status.ok()) return status;
  // Failure messages name the group and the operation; the peer at fault stays attached.
  const std::string what = absl::StrCat(op_name, " #", ctx.seq);
  absl::Status failed =
      PeerError(status.code(), PeerOf(status),
                absl::StrCat("collective group '", name_, "' ", what, " (rank ", rank_, " of ",
                             world_size_, "): ", status.message()));
  broken_ = failed;
  broken_by_ = what;
  backend_->Abort(status);
  return failed;
}

void Group::Finish(Pending& pending, const absl::Status& status) {
  internal::WorkState& state = *pending.state;
  std::unique_lock<std::mutex> lock(state.mu);
  state.done = true;
  state.failed = !status.ok();
  state.message = std::string(status.message());
  state.group = name_;
  state.op = OpName(pending.op);
  state.rank = PeerOf(status);
  state.cv.notify_all();
}

void Group::Run(OpCode op, const CallOptions& call, Operation operation) {
  std::unique_lock<std::mutex> lock(mu_);
  if (queue_.empty() && !busy_ && !stopping_) {
    busy_ = true;  // nothing ahead of us: run here, without a thread hop
    lock.unlock();
    Pending pending{op, call, std::move(operation), nullptr};
    absl::Status status = Execute(pending);
    lock.lock();
    busy_ = false;
    cv_.notify_all();
    lock.unlock();
    if (!status.ok()) ThrowCollectiveError(name_, OpName(op), status);
    return;
  }
  lock.unlock();
  Start(op, call, std::move(operation)).Wait();
}

Work Group::Start(OpCode op, const CallOptions& call, Operation operation) {
  auto pending = std::make_shared<Pending>(
      Pending{op, call, std::move(operation), std::make_shared<internal::WorkState>()});
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) {
    lock.unlock();
    Finish(*pending, absl::CancelledError("collective group '" + name_ + "' was destroyed"));
  } else {
    queue_.push_back(pending);
    cv_.notify_all();
  }
  return Work(pending->state);
}

void Group::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !busy_); });
    if (stopping_) break;
    std::shared_ptr<Pending> pending = queue_.front();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    absl::Status status = Execute(*pending);
    Finish(*pending, status);
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
  // Wait for an inline operation still running, then fail what is left.
  cv_.wait(lock, [&] { return !busy_; });
  for (auto& pending : queue_) {
    Finish(*pending, absl::CancelledError("collective group '" + name_ + "' was destroyed"));
  }
  queue_.clear();
}

}  // namespace troupe::collective
