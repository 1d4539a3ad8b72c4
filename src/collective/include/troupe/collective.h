// Collective communication between the members of a group: actors (or any processes of one job)
// that all-reduce, all-gather, broadcast, ... buffers, as in MPI, NCCL or torch.distributed.
//
//   // In each of N actors:
//   troupe::collective::InitGroup(N, rank, troupe::collective::Backend::kCpu, "grads");
//   troupe::collective::AllReduce(gradients, troupe::collective::ReduceOp::kAvg, "grads");
//
//   // Or from the driver, once; members join at their first operation on the group:
//   troupe::collective::CreateGroup(actors, {0, 1, 2}, Backend::kCpu, "grads");
//
// Every member must call the same operations in the same order with matching sizes; a mismatch is
// reported (not silently corrupted). Every operation has a deadline: when a member dies, leaves or
// stalls, the others' pending and later operations throw CollectiveError naming the group, the
// operation and the missing rank — a dead member within ~50 ms, a stopped one (SIGSTOP, a silent
// link) within GroupOptions::hang_timeout when that is set, any other at the deadline. The group
// then stays broken; DestroyGroup and create it again. See docs/collectives.md.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "troupe/actor.h"
#include "troupe/errors.h"

namespace troupe::collective {

enum class Backend {
  kCpu,   // host memory (and CUDA memory, staged through pinned host memory, in CUDA builds);
          // shared memory between members on one host, TCP between hosts
  kNccl,  // device memory (CUDA); needs a build with the CUDA toolkit and a GPU per member
};

enum class DataType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8 };

// kAvg divides the sum by the world size (integer division for integer types).
enum class ReduceOp { kSum, kProduct, kMin, kMax, kAvg };

// How CPU-backend members reach each other.
enum class Transport {
  kAuto,  // shared memory between members on the same host, TCP otherwise
  kTcp,   // TCP everywhere (for testing the cross-host path on one machine)
};

struct GroupOptions {
  // The default deadline of every operation (a per-call CallOptions::timeout overrides it).
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // How long members wait for each other to join.
  std::chrono::milliseconds rendezvous_timeout = std::chrono::minutes(5);
  Transport transport = Transport::kAuto;
  // Hang detection; 0 (the default): off. Members send each other a small heartbeat every
  // hang_timeout / 5 (at least 50 ms apart) from a background thread. A member waiting in an
  // operation for a peer that has sent nothing for hang_timeout (SIGSTOPped, frozen, its link cut
  // silently) fails at once, its CollectiveError::rank() naming that peer, as if it had died,
  // instead of waiting out `timeout`. A member busy between operations keeps sending: only a
  // stopped process falls silent. Give every member the same value (CreateGroup does); 0 or at
  // least 200 ms. See docs/collectives.md, "Hangs".
  std::chrono::milliseconds hang_timeout{0};
};

struct CallOptions {
  std::chrono::milliseconds timeout{0};  // 0: the group's default
  // The caller's cudaStream_t (nullptr: the legacy default stream). kNccl runs on it; kCpu with
  // device buffers copies after the work queued on it, and work queued later waits for the copies.
  void* cuda_stream = nullptr;
};

// Thrown by every operation that fails. rank() is the member at fault (the one that died, left or
// did not answer in time), or -1 when the failure is local (bad arguments, no such group).
class CollectiveError : public TroupeError {
 public:
  CollectiveError(const std::string& message, std::string group, std::string op, int rank)
      : TroupeError(message), group_(std::move(group)), op_(std::move(op)), rank_(rank) {}
  const std::string& group() const { return group_; }
  const std::string& op() const { return op_; }
  int rank() const { return rank_; }

 private:
  std::string group_, op_;
  int rank_;
};

// Thrown to a member of a driver-declared group that a newer generation of the group leaves out
// (the driver declared the group again without it: it was reported failed, hung or cut off).
// Fencing: such a member must never contribute to the new generation, and it cannot — each
// generation has its own connections, which only its members hold. Stop, or join the job again
// as a new member. rank() is -1 (the fault is this member's).
class ExcludedError : public CollectiveError {
 public:
  ExcludedError(const std::string& message, std::string group, std::string op, int64_t generation)
      : CollectiveError(message, std::move(group), std::move(op), -1), generation_(generation) {}
  // The generation that leaves this member out.
  int64_t generation() const { return generation_; }

 private:
  int64_t generation_;
};

namespace internal {
struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool failed = false;
  std::string message, group, op;
  int rank = -1;
};
}  // namespace internal

// An operation started by an ...Async call. Its buffers must stay alive until Wait returns.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<internal::WorkState> state) : state_(std::move(state)) {}
  // Blocks until the operation finished; throws CollectiveError if it failed.
  void Wait();
  bool IsCompleted() const;

 private:
  std::shared_ptr<internal::WorkState> state_;
};

// Joins this process to group `name` as `rank` of `world_size`; returns once every member has
// joined (members may start in any order), or throws CollectiveError after
// options.rendezvous_timeout.
void InitGroup(int world_size, int rank, Backend backend, const std::string& name = "default",
               const GroupOptions& options = {});
// Leaves the group: pending operations of the other members fail. A group of the same name can
// be created again afterwards. On the driver, also withdraws a CreateGroup declaration.
void DestroyGroup(const std::string& name = "default");
bool IsGroupInitialized(const std::string& name = "default");
int GetRank(const std::string& name = "default");
int GetWorldSize(const std::string& name = "default");
// The generation of the group this member holds: 1 for a group's first declaration, one more each
// time the driver declares it again; 0 for groups made by InitGroup. See docs/collectives.md,
// "Generations".
int64_t GetGeneration(const std::string& name = "default");

namespace internal {
// Declares generation `generation` of group `name` (0: the one after the current declaration;
// otherwise it must be newer than the current one). `elastic`: members holding an earlier
// generation move to this one only through RefreshGroup, never by themselves at their next
// operation (CreateGroup's declarations: at their next operation once their group broke). The
// previous declaration's ranks are marked failed in its rendezvous, so members still joining it
// stop waiting at once. Returns the generation declared.
int64_t DeclareGroup(const std::vector<std::string>& actor_ids, const std::vector<int>& ranks,
                     Backend backend, const std::string& name, const GroupOptions& options,
                     int64_t generation = 0, bool elastic = false);
// The generation of the current declaration of `name` in the KV (0: none). One KV read.
int64_t DeclaredGeneration(const std::string& name);
// Inside an actor: if the KV declares a newer generation of `name` than this member holds (or
// last tried to join), leaves the held one and joins the newest; returns the generation held
// afterwards. Throws ExcludedError when the newest declaration leaves this member out, and
// CollectiveError when the join fails (naming the member that did not join). One KV read when
// nothing changed. `joining`, if given, is set to the generation it tries to join (to tell which
// generation a failed join's rank belongs to).
int64_t RefreshGroup(const std::string& name, int64_t* joining = nullptr);
}  // namespace internal

// From the driver: declares a group of actors, actors[i] being rank ranks[i]. Returns at once;
// each actor joins at its first operation on the group (or GetRank/GetWorldSize call).
template <typename T>
void CreateGroup(const std::vector<ActorHandle<T>>& actors, const std::vector<int>& ranks,
                 Backend backend, const std::string& name = "default",
                 const GroupOptions& options = {}) {
  std::vector<std::string> ids;
  for (const auto& actor : actors) ids.push_back(actor.binary_id());
  internal::DeclareGroup(ids, ranks, backend, name, options);
}

// Operations on raw buffers of `count` elements. Device memory for kNccl; host memory for kCpu,
// or device memory in builds with CUDA (see docs/collectives.md, "CUDA buffers on CPU groups").
void AllReduce(void* data, size_t count, DataType dtype, ReduceOp op,
               const std::string& group = "default", const CallOptions& call = {});
// `recv` holds world_size * count elements: rank r's `send` lands at r * count.
void AllGather(const void* send, void* recv, size_t count, DataType dtype,
               const std::string& group = "default", const CallOptions& call = {});
// `send` holds world_size * recv_count elements; rank r receives the reduction of block r.
void ReduceScatter(const void* send, void* recv, size_t recv_count, DataType dtype, ReduceOp op,
                   const std::string& group = "default", const CallOptions& call = {});
void Broadcast(void* data, size_t count, DataType dtype, int root,
               const std::string& group = "default", const CallOptions& call = {});
// The reduction lands in `data` on `root`; other members' buffers are left unchanged.
void Reduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
            const std::string& group = "default", const CallOptions& call = {});
void Barrier(const std::string& group = "default", const CallOptions& call = {});
void Send(const void* data, size_t count, DataType dtype, int peer,
          const std::string& group = "default", const CallOptions& call = {});
void Recv(void* data, size_t count, DataType dtype, int peer, const std::string& group = "default",
          const CallOptions& call = {});

// The same, started in the background (in call order, after the caller's earlier operations on
// the group); Wait() on the result.
Work AllReduceAsync(void* data, size_t count, DataType dtype, ReduceOp op,
                    const std::string& group = "default", const CallOptions& call = {});
Work AllGatherAsync(const void* send, void* recv, size_t count, DataType dtype,
                    const std::string& group = "default", const CallOptions& call = {});
Work ReduceScatterAsync(const void* send, void* recv, size_t recv_count, DataType dtype,
                        ReduceOp op, const std::string& group = "default",
                        const CallOptions& call = {});
Work BroadcastAsync(void* data, size_t count, DataType dtype, int root,
                    const std::string& group = "default", const CallOptions& call = {});
Work ReduceAsync(void* data, size_t count, DataType dtype, ReduceOp op, int root,
                 const std::string& group = "default", const CallOptions& call = {});
Work BarrierAsync(const std::string& group = "default", const CallOptions& call = {});
Work SendAsync(const void* data, size_t count, DataType dtype, int peer,
               const std::string& group = "default", const CallOptions& call = {});
Work RecvAsync(void* data, size_t count, DataType dtype, int peer,
               const std::string& group = "default", const CallOptions& call = {});

// std::vector conveniences for float, double, int32_t, int64_t and uint8_t.
template <typename T>
constexpr DataType DataTypeOf();
template <>
constexpr DataType DataTypeOf<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType DataTypeOf<double>() {
  return DataType::kFloat64;
}
template <>
constexpr DataType DataTypeOf<int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType DataTypeOf<int64_t>() {
  return DataType::kInt64;
}
template <>
constexpr DataType DataTypeOf<uint8_t>() {
  return DataType::kUInt8;
}

template <typename T>
void AllReduce(std::vector<T>& data, ReduceOp op, const std::string& group = "default",
               const CallOptions& call = {}) {
  AllReduce(data.data(), data.size(), DataTypeOf<T>(), op, group, call);
}
// Returns world_size * send.size() elements.
template <typename T>
std::vector<T> AllGather(const std::vector<T>& send, const std::string& group = "default",
                         const CallOptions& call = {}) {
  std::vector<T> recv(send.size() * GetWorldSize(group));
  AllGather(send.data(), recv.data(), send.size(), DataTypeOf<T>(), group, call);
  return recv;
}
// `send.size()` must be a multiple of the world size; returns this rank's block.
template <typename T>
std::vector<T> ReduceScatter(const std::vector<T>& send, ReduceOp op,
                             const std::string& group = "default", const CallOptions& call = {}) {
  const size_t world = GetWorldSize(group);
  if (send.size() % world != 0) {
    throw CollectiveError("ReduceScatter: " + std::to_string(send.size()) +
                              " elements do not split evenly over " + std::to_string(world) +
                              " ranks; pad the buffer to a multiple of the world size",
                          group, "reduce_scatter", -1);
  }
  std::vector<T> recv(send.size() / world);
  ReduceScatter(send.data(), recv.data(), recv.size(), DataTypeOf<T>(), op, group, call);
  return recv;
}
template <typename T>
void Broadcast(std::vector<T>& data, int root, const std::string& group = "default",
               const CallOptions& call = {}) {
  Broadcast(data.data(), data.size(), DataTypeOf<T>(), root, group, call);
}
template <typename T>
void Send(const std::vector<T>& data, int peer, const std::string& group = "default",
          const CallOptions& call = {}) {
  Send(data.data(), data.size(), DataTypeOf<T>(), peer, group, call);
}
template <typename T>
void Recv(std::vector<T>& data, int peer, const std::string& group = "default",
          const CallOptions& call = {}) {
  Recv(data.data(), data.size(), DataTypeOf<T>(), peer, group, call);
}

}  // namespace troupe::collective
