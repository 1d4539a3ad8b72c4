// The CPU backend: collectives on host memory over the Mesh's links.
//
// Every algorithm is a sequence of steps; in a step a member streams byte ranges to some peers
// and from others at the same time (Exchange), each range framed by a 16-byte header (operation,
// sequence number, step, size) so mismatched calls are reported instead of corrupting data.
// Received bytes are reduced or copied straight out of the link (the shared-memory ring; on TCP,
// copies are received straight into place), and a range streams through the link in pieces as
// the receiver drains it (chunked, pipelined).
//
//   small buffers (<= 64 KiB): one step, everyone sends its buffer to everyone, each member
//     reduces in rank order (same result everywhere, latency of one message);
//   large buffers: ring reduce-scatter then ring all-gather (each member sends and receives
//     2 (n-1)/n of the buffer: bandwidth-optimal); broadcast = scatter + ring all-gather;
//     reduce = ring reduce-scatter + gather. The ring's steps run as one Exchange, pipelined:
//     step s + 1 forwards each piece of the chunk step s reduces (or receives) once it is final,
//     so all-reduce's reduce-scatter flows on into its all-gather without a pause.
// Thread-compatible (the Group runs one operation at a time).
#pragma once

#include <poll.h>

#include <memory>
#include <vector>

#include "src/collective/backend.h"
#include "src/collective/mesh.h"

namespace troupe::collective {

class CpuBackend : public CommBackend {
 public:
  // Buffers up to this size take the one-step (latency) algorithms.
  static constexpr size_t kSmallBytes = 64 << 10;

  explicit CpuBackend(std::unique_ptr<Mesh> mesh);

  absl::Status AllReduce(void* data, size_t count, DataType dtype, ReduceOp op,
                         const OpContext& ctx) override;
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType dtype,
                         const OpContext& ctx) override;
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                             ReduceOp op, const OpContext& ctx) override;
  absl::Status Broadcast(void* data, size_t count, DataType dtype, int root,
                         const OpContext& ctx) override;
  absl::Status Reduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
                      const OpContext& ctx) override;
  absl::Status Barrier(const OpContext& ctx) override;
  absl::Status Send(const void* data, size_t count, DataType dtype, int peer,
                    const OpContext& ctx) override;
  absl::Status Recv(void* data, size_t count, DataType dtype, int peer,
                    const OpContext& ctx) override;
  void Abort(const absl::Status& status) override { mesh_->Abort(status); }

 private:
  // One byte range to or from a peer within a step.
  struct Transfer {
    int peer;
    char* data;
    size_t bytes;
    bool reduce = false;  // receives: combine into `data` instead of copying
    // Reducing receives: data = base (op) incoming, when base is not data itself (it saves
    // copying the whole input first; only received ranges are touched).
    const char* base = nullptr;
    // Sends: forwards what step.recvs[source] delivers, each byte as soon as it is final there
    // (the ring's steps pipelined: step s + 1 sends what step s reduced, while it arrives).
    int source = -1;
    // Reducing receives: divide each piece by the world size once reduced (kAvg's owned chunk,
    // before it is forwarded).
    bool finish_average = false;
    // Ring step number in the header: step.index + segment (one Exchange may run several).
    uint16_t segment = 0;
    // Progress, kept by Exchange.
    int stage = 0;  // 0 header, 1 payload, 2 padding, 3 done
    size_t done = 0;
    char header[16];
  };
  // A step: all sends and receives progress together until all are done. Transfers with the same
  // peer and direction run in the order listed (they share the link).
  struct Step {
    uint32_t seq;
    uint16_t index;
    DataType dtype;
    ReduceOp op;
    std::vector<Transfer> sends, recvs;
  };
  absl::Status Exchange(const OpContext& ctx, Step& step);
  // True when every unfinished transfer of the step is on a TCP link (then waiting polls).
  bool WaitsOnlyOnSockets(const Step& step);
  // Payload bytes of a receive that are final in place (what a send sourced from it may send).
  static size_t Delivered(const Transfer& t);
  // Whether a send could move bytes now if its link had room (false: it waits for its source).
  bool SendHasData(const Step& step, const Transfer& t) const;
  // The poll entries of the transfers at the head of their links that wait on a socket.
  void PollEntries(const Step& step, std::vector<pollfd>* fds);
  absl::StatusOr<bool> AdvanceSend(const OpContext& ctx, const Step& step, Transfer& t);
  absl::StatusOr<bool> AdvanceRecv(const OpContext& ctx, const Step& step, Transfer& t);
  void FillHeader(const OpContext& ctx, const Step& step, Transfer& t);
  absl::Status LinkError(int peer, const absl::Status& status);

  // Ring reduce-scatter of `input` (count elements in n chunks) into `work` (which may be
  // `input`): afterwards work holds the reduction of chunk (rank + 1 + shift) mod n. Adds the
  // n - 1 ring steps to `step` as segments (each forwarding what the previous one reduced).
  void AddRingReduceScatter(Step& step, const char* input, char* work, size_t count, int shift);
  // Ring all-gather in place: each member starts holding chunk (rank + shift) mod n. Adds n - 1
  // segments to `step`; with `chained`, the first sends what the step's last receive (the
  // reduce-scatter's) delivers, as it arrives.
  void AddRingAllGather(Step& step, char* data, size_t count, int shift, bool chained);
  // Sends `bytes` to every peer and receives each peer's `bytes` into scratch block p.
  absl::Status AllToAll(const char* data, size_t bytes, DataType dtype, const OpContext& ctx);
  char* Scratch(size_t bytes);

  std::unique_ptr<Mesh> mesh_;
  const int rank_;
  const int world_;
  std::vector<uint32_t> sent_to_, received_from_;  // point-to-point message numbers per peer
  std::vector<char> scratch_;
};

}  // namespace troupe::collective
