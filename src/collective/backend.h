// What a collective backend implements: the operations of one member of one group, run one at a
// time (the Group serialises them), each returning once done or failed. Failures that a peer
// caused carry its rank (PeerError in mesh.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/collective/mesh.h"
#include "troupe/collective.h"

namespace troupe::collective {

enum class OpCode : uint8_t {
  kAllReduce = 1,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kBarrier,
  kSendRecv,
};
const char* OpName(OpCode op);

struct OpContext {
  OpCode op;
  uint32_t seq = 0;  // collective operations: numbered alike on every member
  absl::Time deadline;
  absl::Duration timeout;  // for messages
  void* cuda_stream = nullptr;
};

class CommBackend {
 public:
  virtual ~CommBackend() = default;
  virtual absl::Status AllReduce(void* data, size_t count, DataType dtype, ReduceOp op,
                                 const OpContext& ctx) = 0;
  virtual absl::Status AllGather(const void* send, void* recv, size_t count, DataType dtype,
                                 const OpContext& ctx) = 0;
  virtual absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count,
                                     DataType dtype, ReduceOp op, const OpContext& ctx) = 0;
  virtual absl::Status Broadcast(void* data, size_t count, DataType dtype, int root,
                                 const OpContext& ctx) = 0;
  virtual absl::Status Reduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
                              const OpContext& ctx) = 0;
  virtual absl::Status Barrier(const OpContext& ctx) = 0;
  virtual absl::Status Send(const void* data, size_t count, DataType dtype, int peer,
                            const OpContext& ctx) = 0;
  virtual absl::Status Recv(void* data, size_t count, DataType dtype, int peer,
                            const OpContext& ctx) = 0;
  // Whether `data` may be handed to this backend by `call` ("AllReduce"); checked before the
  // operation is queued, so a refused buffer fails the call without breaking the group. Reads
  // no mutable state: callable from any thread.
  virtual absl::Status CheckBuffer(const void* data, const std::string& call) {
    return absl::OkStatus();
  }
  // Gives up for good: peers' operations fail with `status`; connections close.
  virtual void Abort(const absl::Status& status) = 0;
};

// The NCCL backend registers its factory here when it is linked in (CUDA builds); without it,
// Backend::kNccl is refused with a clear error.
using NcclFactory = std::function<absl::StatusOr<std::unique_ptr<CommBackend>>(
    std::unique_ptr<Mesh> mesh, absl::Time deadline)>;
void RegisterNcclFactory(NcclFactory factory);
const NcclFactory* GetNcclFactory();

}  // namespace troupe::collective
