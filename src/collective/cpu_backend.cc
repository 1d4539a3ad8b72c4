#include "src/collective/cpu_backend.h"

#include <sched.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/collective/reduce.h"

namespace troupe::collective {
namespace {

// Before sleeping on the doorbell, spin this many idle passes (cheap when peers are running on
// other cores; short, because on a busy machine the peer may need our core).
constexpr int kSpinPasses = 64;
constexpr int kYieldPasses = 8;

struct WireHeader {
  uint32_t seq;
  uint16_t step;
  uint8_t op;
  uint8_t dtype;
  uint64_t bytes;
};
static_assert(sizeof(WireHeader) == 16);

size_t Padding(size_t bytes) { return (8 - bytes % 8) % 8; }

// Chunk i of `count` elements split n ways: the first count % n chunks get one extra element.
std::pair<size_t, size_t> ChunkOf(size_t count, int n, int i) {
  const size_t base = count / n, extra = count % n;
  const size_t offset = i * base + std::min<size_t>(i, extra);
  return {offset, base + (static_cast<size_t>(i) < extra ? 1 : 0)};
}

int Mod(int value, int n) { return ((value % n) + n) % n; }

void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

const char* OpName(OpCode op) {
  switch (op) {
    case OpCode::kAllReduce:
      return "allreduce";
    case OpCode::kAllGather:
      return "allgather";
    case OpCode::kReduceScatter:
      return "reduce_scatter";
    case OpCode::kBroadcast:
      return "broadcast";
    case OpCode::kReduce:
      return "reduce";
    case OpCode::kBarrier:
      return "barrier";
    case OpCode::kSendRecv:
      return "send/recv";
  }
  return "?";
}

CpuBackend::CpuBackend(std::unique_ptr<Mesh> mesh)
    : mesh_(std::move(mesh)),
      rank_(mesh_->rank()),
      world_(mesh_->world_size()),
      sent_to_(world_),
      received_from_(world_) {}

char* CpuBackend::Scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

void CpuBackend::FillHeader(const OpContext& ctx, const Step& step, Transfer& t) {
  WireHeader header{step.seq, static_cast<uint16_t>(step.index + t.segment),
                    static_cast<uint8_t>(ctx.op),
                    static_cast<uint8_t>(step.dtype), t.bytes};
  std::memcpy(t.header, &header, sizeof(header));
}

absl::Status CpuBackend::LinkError(int peer, const absl::Status& status) {
  // A peer that aborted said why on its control connection: prefer that to "connection reset".
  if (absl::Status reason = mesh_->CheckPeers(); !reason.ok()) return reason;
  return PeerError(absl::StatusCode::kUnavailable, peer,
                   absl::StrCat("rank ", peer, " is gone: ", status.message()));
}

absl::StatusOr<bool> CpuBackend::AdvanceSend(const OpContext& ctx, const Step& step, Transfer& t) {
  Link* link = mesh_->link(t.peer);
  const size_t unit = ElementSize(step.dtype);
  bool progressed = false;
  while (t.stage < 3) {
    const char* from;
    size_t total, ready, chunk_unit;
    if (t.stage == 0) {
      from = t.header, total = ready = sizeof(WireHeader), chunk_unit = 8;
    } else if (t.stage == 1) {
      // A forwarded range goes only as far as its source has delivered.
      from = t.data, total = t.bytes, chunk_unit = unit;
      ready = t.source < 0 ? t.bytes : Delivered(step.recvs[t.source]);
    } else {
      static const char kZeros[8] = {};
      from = kZeros, total = ready = Padding(t.bytes), chunk_unit = unit;
    }
    if (t.done < ready) {
      auto taken = link->Write(from + t.done, ready - t.done, chunk_unit);
      if (!taken.ok()) return LinkError(t.peer, taken.status());
      if (*taken == 0) return progressed;
      progressed = true;
      t.done += *taken;
    }
    if (t.done < total) {
      if (t.done < ready) continue;  // the link took part: offer the rest
      return progressed;             // waiting for the source
    }
    ++t.stage;
    t.done = 0;
  }
  return progressed;
}

absl::StatusOr<bool> CpuBackend::AdvanceRecv(const OpContext& ctx, const Step& step, Transfer& t) {
  Link* link = mesh_->link(t.peer);
  const size_t unit = ElementSize(step.dtype);
  bool progressed = false;
  while (t.stage < 3) {
    const size_t left = t.stage == 0   ? sizeof(WireHeader) - t.done
                        : t.stage == 1 ? t.bytes - t.done
                                       : Padding(t.bytes) - t.done;
    if (left > 0) {
      if (t.stage == 1 && !t.reduce) {  // a plain copy: straight into place
        auto got = link->ReadInto(t.data + t.done, left);
        if (!got.ok()) return LinkError(t.peer, got.status());
        if (*got == 0) return progressed;
        progressed = true;
        t.done += *got;
        if (*got < left) continue;
        ++t.stage;
        t.done = 0;
        continue;
      }
      auto readable = link->Readable();
      if (!readable.ok()) return LinkError(t.peer, readable.status());
      auto [data, available] = *readable;
      size_t take = std::min(available, left);
      if (t.stage == 1) take -= take % unit;
      if (take == 0) return progressed;
      if (t.stage == 0) {
        std::memcpy(t.header + t.done, data, take);
      } else if (t.stage == 1) {
        if (t.reduce) {
          if (t.base != nullptr && t.base != t.data) {
            std::memcpy(t.data + t.done, t.base + t.done, take);
          }
          ReduceInto(step.dtype, step.op, t.data + t.done, data, take / unit);
          if (t.finish_average) FinishAverage(step.dtype, t.data + t.done, take / unit, world_);
        } else {
          std::memcpy(t.data + t.done, data, take);
        }
      }
      link->Consume(take);
      progressed = true;
      t.done += take;
      if (take < left) continue;
    }
    if (t.stage == 0) {  // a whole header: is the peer in the same operation as we are?
      WireHeader got;
      std::memcpy(&got, t.header, sizeof(got));
      const uint16_t index = step.index + t.segment;
      if (got.seq != step.seq || got.step != index || got.op != static_cast<uint8_t>(ctx.op) ||
          got.dtype != static_cast<uint8_t>(step.dtype) || got.bytes != t.bytes) {
        return PeerError(
            absl::StatusCode::kFailedPrecondition, t.peer,
            absl::StrCat("rank ", t.peer, " is in ", OpName(static_cast<OpCode>(got.op)), " #",
                         got.seq, " (", DataTypeName(static_cast<DataType>(got.dtype)), ", ",
                         got.bytes, " bytes in step ", got.step, ") while this rank is in ",
                         OpName(ctx.op), " #", step.seq, " (", DataTypeName(step.dtype), ", ",
                         t.bytes, " bytes in step ", index,
                         "): every member must call the same operations in the same order with "
                         "matching sizes and types"));
      }
    }
    ++t.stage;
    t.done = 0;
  }
  return progressed;
}

bool CpuBackend::WaitsOnlyOnSockets(const Step& step) {
  for (const auto* transfers : {&step.sends, &step.recvs}) {
    for (const Transfer& t : *transfers) {
      if (t.stage != 3 && mesh_->link(t.peer)->fd() < 0) return false;  // shared memory
    }
  }
  return true;
}

size_t CpuBackend::Delivered(const Transfer& t) {
  return t.stage == 0 ? 0 : t.stage == 1 ? t.done : t.bytes;
}

bool CpuBackend::SendHasData(const Step& step, const Transfer& t) const {
  if (t.stage != 1 || t.source < 0) return true;
  // TCP links take any byte count; shared-memory rings whole elements.
  const size_t unit = mesh_->link(t.peer)->fd() >= 0 ? 1 : ElementSize(step.dtype);
  return Delivered(step.recvs[t.source]) >= t.done + std::min(unit, t.bytes - t.done);
}

void CpuBackend::PollEntries(const Step& step, std::vector<pollfd>* fds) {
  fds->clear();
  std::vector<bool> sending(world_), receiving(world_);  // a transfer ahead holds the link
  for (const Transfer& t : step.sends) {
    if (t.stage == 3 || sending[t.peer]) continue;
    sending[t.peer] = true;
    const int fd = mesh_->link(t.peer)->fd();
    if (fd >= 0 && SendHasData(step, t)) fds->push_back({fd, POLLOUT, 0});
  }
  for (const Transfer& t : step.recvs) {
    if (t.stage == 3 || receiving[t.peer]) continue;
    receiving[t.peer] = true;
    const int fd = mesh_->link(t.peer)->fd();
    if (fd >= 0) fds->push_back({fd, POLLIN, 0});
  }
}

absl::Status CpuBackend::Exchange(const OpContext& ctx, Step& step) {
  for (Transfer& t : step.sends) FillHeader(ctx, step, t);
  int idle = 0;
  std::vector<pollfd> fds;
  // Per peer, the first unfinished transfer of each direction in this pass (later ones wait).
  std::vector<bool> sending(world_), receiving(world_);
  while (true) {
    const uint32_t doorbell = mesh_->doorbell();
    bool progressed = false, pending = false;
    std::fill(sending.begin(), sending.end(), false);
    std::fill(receiving.begin(), receiving.end(), false);
    // Receives first: what they deliver, forwarding sends can pass on in the same pass.
    for (Transfer& t : step.recvs) {
      if (t.stage == 3) continue;
      pending = true;
      if (receiving[t.peer]) continue;
      auto moved = AdvanceRecv(ctx, step, t);
      if (!moved.ok()) return moved.status();
      progressed |= *moved;
      receiving[t.peer] = t.stage != 3;
    }
    for (Transfer& t : step.sends) {
      if (t.stage == 3) continue;
      pending = true;
      if (sending[t.peer]) continue;
      auto moved = AdvanceSend(ctx, step, t);
      if (!moved.ok()) return moved.status();
      progressed |= *moved;
      sending[t.peer] = t.stage != 3;
    }
    if (!pending) return absl::OkStatus();
    if (progressed) {
      idle = 0;
      continue;
    }
    // Spinning pays off on shared memory (a peer's write shows up within nanoseconds); on a
    // socket every pass is two system calls taking CPU the kernel needs to move the data: poll.
    if (WaitsOnlyOnSockets(step)) idle = kSpinPasses + kYieldPasses;
    if (++idle < kSpinPasses) {
      CpuRelax();
      continue;
    }
    if (idle < kSpinPasses + kYieldPasses) {
      sched_yield();
      continue;
    }
    PollEntries(step, &fds);
    absl::Status status = mesh_->WaitForProgress(doorbell, &fds, ctx.deadline);
    // The operation's own deadline (a hung peer's kDeadlineExceeded names it already).
    if (absl::IsDeadlineExceeded(status) && PeerOf(status) < 0) {
      int waiting_for = -1;
      for (const Transfer& t : step.recvs) {
        if (t.stage != 3 && waiting_for < 0) waiting_for = t.peer;
      }
      for (const Transfer& t : step.sends) {
        if (t.stage != 3 && waiting_for < 0) waiting_for = t.peer;
      }
      return PeerError(
          absl::StatusCode::kDeadlineExceeded, waiting_for,
          absl::StrCat("timed out after ", absl::FormatDuration(ctx.timeout), " waiting for rank ",
                       waiting_for, " (it is stuck, slower than the timeout, or not calling ",
                       OpName(ctx.op), ")"));
    }
    if (!status.ok()) return status;
  }
}

void CpuBackend::AddRingReduceScatter(Step& step, const char* input, char* work, size_t count,
                                      int shift) {
  const size_t unit = ElementSize(step.dtype);
  const int next = Mod(rank_ + 1, world_), prev = Mod(rank_ - 1, world_);
  for (int s = 0; s < world_ - 1; ++s) {
    auto [send_offset, send_count] = ChunkOf(count, world_, Mod(rank_ - s + shift, world_));
    auto [recv_offset, recv_count] = ChunkOf(count, world_, Mod(rank_ - s - 1 + shift, world_));
    const uint16_t segment = step.sends.size();
    // Step 0 sends from the input; later steps forward what the previous step reduces (the same
    // chunk), piece by piece as it is reduced.
    Transfer send{next, const_cast<char*>(s == 0 ? input : work) + send_offset * unit,
                  send_count * unit};
    if (s > 0) send.source = step.recvs.size() - 1;
    send.segment = segment;
    step.sends.push_back(send);
    Transfer recv{prev, work + recv_offset * unit, recv_count * unit, /*reduce=*/true,
                  input + recv_offset * unit};
    recv.segment = segment;
    step.recvs.push_back(recv);
  }
}

void CpuBackend::AddRingAllGather(Step& step, char* data, size_t count, int shift, bool chained) {
  const size_t unit = ElementSize(step.dtype);
  const int next = Mod(rank_ + 1, world_), prev = Mod(rank_ - 1, world_);
  for (int s = 0; s < world_ - 1; ++s) {
    auto [send_offset, send_count] = ChunkOf(count, world_, Mod(rank_ + shift - s, world_));
    auto [recv_offset, recv_count] = ChunkOf(count, world_, Mod(rank_ + shift - s - 1, world_));
    const uint16_t segment = step.sends.size();
    Transfer send{next, data + send_offset * unit, send_count * unit};
    if (s > 0 || chained) send.source = step.recvs.size() - 1;
    send.segment = segment;
    step.sends.push_back(send);
    Transfer recv{prev, data + recv_offset * unit, recv_count * unit};
    recv.segment = segment;
    step.recvs.push_back(recv);
  }
}

absl::Status CpuBackend::AllToAll(const char* data, size_t bytes, DataType dtype,
                                  const OpContext& ctx) {
  char* scratch = Scratch(bytes * world_);
  Step step{ctx.seq, 0, dtype, ReduceOp::kSum, {}, {}};
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    step.sends.push_back({peer, const_cast<char*>(data), bytes});
    step.recvs.push_back({peer, scratch + peer * bytes, bytes});
  }
  return Exchange(ctx, step);
}

absl::Status CpuBackend::AllReduce(void* data_ptr, size_t count, DataType dtype, ReduceOp op,
                                   const OpContext& ctx) {
  char* data = static_cast<char*>(data_ptr);
  const size_t bytes = count * ElementSize(dtype);
  if (world_ == 1) return absl::OkStatus();
  if (bytes <= kSmallBytes) {
    if (auto status = AllToAll(data, bytes, dtype, ctx); !status.ok()) return status;
    // Combine in rank order, so every member computes bit-identical results.
    char* scratch = Scratch(bytes * world_);
    std::memcpy(scratch + rank_ * bytes, data, bytes);
    for (int peer = 1; peer < world_; ++peer)
      ReduceInto(dtype, op, scratch, scratch + peer * bytes, count);
    std::memcpy(data, scratch, bytes);
    if (op == ReduceOp::kAvg) FinishAverage(dtype, data, count, world_);
    return absl::OkStatus();
  }
  // Reduce-scatter then all-gather as one pipelined exchange: the chunk a member finishes
  // reducing (averaging, for kAvg) goes on to the all-gather piece by piece.
  Step step{ctx.seq, 0, dtype, op, {}, {}};
  AddRingReduceScatter(step, data, data, count, 0);
  step.recvs.back().finish_average = op == ReduceOp::kAvg;
  AddRingAllGather(step, data, count, 1, /*chained=*/true);
  return Exchange(ctx, step);
}

absl::Status CpuBackend::AllGather(const void* send, void* recv_ptr, size_t count, DataType dtype,
                                   const OpContext& ctx) {
  char* recv = static_cast<char*>(recv_ptr);
  const size_t bytes = count * ElementSize(dtype);
  if (recv + rank_ * bytes != send) std::memmove(recv + rank_ * bytes, send, bytes);
  if (world_ == 1) return absl::OkStatus();
  if (bytes * world_ <= kSmallBytes) {
    Step step{ctx.seq, 0, dtype, ReduceOp::kSum, {}, {}};
    for (int peer = 0; peer < world_; ++peer) {
      if (peer == rank_) continue;
      step.sends.push_back({peer, recv + rank_ * bytes, bytes});
      step.recvs.push_back({peer, recv + peer * bytes, bytes});
    }
    return Exchange(ctx, step);
  }
  Step step{ctx.seq, 0, dtype, ReduceOp::kSum, {}, {}};
  AddRingAllGather(step, recv, count * world_, 0, /*chained=*/false);
  return Exchange(ctx, step);
}

absl::Status CpuBackend::ReduceScatter(const void* send_ptr, void* recv, size_t recv_count,
                                       DataType dtype, ReduceOp op, const OpContext& ctx) {
  const char* send = static_cast<const char*>(send_ptr);
  const size_t bytes = recv_count * ElementSize(dtype);
  if (world_ == 1) {
    std::memmove(recv, send, bytes);
    return absl::OkStatus();
  }
  if (bytes * world_ <= kSmallBytes) {
    char* scratch = Scratch(bytes * world_);
    Step step{ctx.seq, 0, dtype, op, {}, {}};
    for (int peer = 0; peer < world_; ++peer) {
      if (peer == rank_) continue;
      step.sends.push_back({peer, const_cast<char*>(send + peer * bytes), bytes});
      step.recvs.push_back({peer, scratch + peer * bytes, bytes});
    }
    if (auto status = Exchange(ctx, step); !status.ok()) return status;
    std::memcpy(scratch + rank_ * bytes, send + rank_ * bytes, bytes);
    for (int peer = 1; peer < world_; ++peer) {
      ReduceInto(dtype, op, scratch, scratch + peer * bytes, recv_count);
    }
    std::memcpy(recv, scratch, bytes);
  } else {
    char* work = Scratch(bytes * world_);
    // shift -1: afterwards this member holds chunk `rank` (its own block).
    Step step{ctx.seq, 0, dtype, op, {}, {}};
    AddRingReduceScatter(step, send, work, recv_count * world_, -1);
    if (auto status = Exchange(ctx, step); !status.ok()) return status;
    std::memcpy(recv, work + rank_ * bytes, bytes);
  }
  if (op == ReduceOp::kAvg) FinishAverage(dtype, recv, recv_count, world_);
  return absl::OkStatus();
}

absl::Status CpuBackend::Broadcast(void* data_ptr, size_t count, DataType dtype, int root,
                                   const OpContext& ctx) {
  char* data = static_cast<char*>(data_ptr);
  const size_t unit = ElementSize(dtype), bytes = count * unit;
  if (world_ == 1) return absl::OkStatus();
  Step step{ctx.seq, 0, dtype, ReduceOp::kSum, {}, {}};
  if (bytes <= kSmallBytes || count < static_cast<size_t>(world_)) {
    if (rank_ == root) {
      for (int peer = 0; peer < world_; ++peer) {
        if (peer != root) step.sends.push_back({peer, data, bytes});
      }
    } else {
      step.recvs.push_back({root, data, bytes});
    }
    return Exchange(ctx, step);
  }
  // Scatter chunk i to member i, then a ring all-gather: the root sends each byte once.
  if (rank_ == root) {
    for (int peer = 0; peer < world_; ++peer) {
      if (peer == root) continue;
      auto [offset, n] = ChunkOf(count, world_, peer);
      step.sends.push_back({peer, data + offset * unit, n * unit});
    }
  } else {
    auto [offset, n] = ChunkOf(count, world_, rank_);
    step.recvs.push_back({root, data + offset * unit, n * unit});
  }
  if (auto status = Exchange(ctx, step); !status.ok()) return status;
  Step gather{ctx.seq, 1, dtype, ReduceOp::kSum, {}, {}};
  AddRingAllGather(gather, data, count, 0, /*chained=*/false);
  return Exchange(ctx, gather);
}

absl::Status CpuBackend::Reduce(void* data_ptr, size_t count, DataType dtype, ReduceOp op, int root,
                                const OpContext& ctx) {
  char* data = static_cast<char*>(data_ptr);
  const size_t unit = ElementSize(dtype), bytes = count * unit;
  if (world_ == 1) return absl::OkStatus();
  if (bytes <= kSmallBytes || count < static_cast<size_t>(world_)) {
    Step step{ctx.seq, 0, dtype, op, {}, {}};
    char* scratch = Scratch(bytes * world_);
    if (rank_ == root) {
      for (int peer = 0; peer < world_; ++peer) {
        if (peer != root) step.recvs.push_back({peer, scratch + peer * bytes, bytes});
      }
    } else {
      step.sends.push_back({root, data, bytes});
    }
    if (auto status = Exchange(ctx, step); !status.ok()) return status;
    if (rank_ != root) return absl::OkStatus();
    std::memcpy(scratch + root * bytes, data, bytes);
    for (int peer = 1; peer < world_; ++peer)
      ReduceInto(dtype, op, scratch, scratch + peer * bytes, count);
    std::memcpy(data, scratch, bytes);
    if (op == ReduceOp::kAvg) FinishAverage(dtype, data, count, world_);
    return absl::OkStatus();
  }
  // Ring reduce-scatter (into scratch on non-roots: they keep their input), then gather.
  char* work = rank_ == root ? data : Scratch(bytes);
  Step reduce_scatter{ctx.seq, 0, dtype, op, {}, {}};
  AddRingReduceScatter(reduce_scatter, data, work, count, -1);
  if (auto status = Exchange(ctx, reduce_scatter); !status.ok()) return status;
  auto [offset, owned] = ChunkOf(count, world_, rank_);
  if (op == ReduceOp::kAvg) FinishAverage(dtype, work + offset * unit, owned, world_);
  Step gather{ctx.seq, static_cast<uint16_t>(world_ - 1), dtype, op, {}, {}};
  if (rank_ == root) {
    for (int peer = 0; peer < world_; ++peer) {
      if (peer == root) continue;
      auto [peer_offset, n] = ChunkOf(count, world_, peer);
      gather.recvs.push_back({peer, data + peer_offset * unit, n * unit});
    }
  } else {
    gather.sends.push_back({root, work + offset * unit, owned * unit});
  }
  return Exchange(ctx, gather);
}

absl::Status CpuBackend::Barrier(const OpContext& ctx) {
  if (world_ == 1) return absl::OkStatus();
  Step step{ctx.seq, 0, DataType::kUInt8, ReduceOp::kSum, {}, {}};
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    step.sends.push_back({peer, nullptr, 0});
    step.recvs.push_back({peer, nullptr, 0});
  }
  return Exchange(ctx, step);
}

absl::Status CpuBackend::Send(const void* data, size_t count, DataType dtype, int peer,
                              const OpContext& ctx) {
  // Point-to-point messages are numbered per pair: other members do not take part.
  Step step{sent_to_[peer]++, 0, dtype, ReduceOp::kSum, {}, {}};
  step.sends.push_back(
      {peer, static_cast<char*>(const_cast<void*>(data)), count * ElementSize(dtype)});
  return Exchange(ctx, step);
}

absl::Status CpuBackend::Recv(void* data, size_t count, DataType dtype, int peer,
                              const OpContext& ctx) {
  Step step{received_from_[peer]++, 0, dtype, ReduceOp::kSum, {}, {}};
  step.recvs.push_back({peer, static_cast<char*>(data), count * ElementSize(dtype)});
  return Exchange(ctx, step);
}

}  // namespace troupe::collective
