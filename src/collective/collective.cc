// The public collective API (troupe/collective.h): the process's groups by name, group
// declarations from the driver (CreateGroup), and argument checks in front of the Group.
#include <unistd.h>

#include <map>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "src/collective/cpu_backend.h"
#include "src/collective/group.h"
#include "src/collective/nccl_checks.h"
#include "src/collective/reduce.h"
#include "src/collective/staging_backend.h"
#include "troupe/runtime.h"

namespace troupe::collective {
namespace {

absl::Mutex groups_mu;
// Never destroyed: groups may still be in use while the process exits.
auto* groups ABSL_GUARDED_BY(groups_mu) = new std::map<std::string, std::shared_ptr<Group>>();

NcclFactory* nccl_factory = nullptr;

[[noreturn]] void Fail(const std::string& group, const char* op, const std::string& message) {
  throw CollectiveError(absl::StrCat("collective group '", group, "' ", op, ": ", message), group,
                        op, -1);
}

::troupe::internal::Runtime& RuntimeFor(const std::string& group, const char* op) {
  ::troupe::internal::Runtime* runtime = ::troupe::internal::CurrentRuntime();
  if (runtime == nullptr) Fail(group, op, "troupe::Init() has not been called in this process");
  return *runtime;
}

std::string DeclarationKey(const std::string& name) { return "collective/" + name + "/decl"; }

KvAccess KvOf(::troupe::internal::Runtime& runtime) {
  const std::string ns = runtime.JobNamespace();
  return {
      [&runtime, ns](const std::string& key) { return runtime.KvGet(ns, key); },
      [&runtime, ns](const std::string& key, const std::string& value) {
        runtime.KvPut(ns, key, value, /*overwrite=*/true);
      },
      [&runtime, ns](const std::string& key) { runtime.KvDelete(ns, key, /*by_prefix=*/false); }};
}

void CheckName(const std::string& name, const char* op) {
  if (name.empty() || name.find_first_of("\n/") != std::string::npos) {
    Fail(name, op, "a group name must be non-empty, without '/' or newlines");
  }
}

// Heartbeats go every hang_timeout / 5, at least 50 ms apart: shorter timeouts would take a
// member for hung after a heartbeat or two late.
constexpr std::chrono::milliseconds kMinHangTimeout{200};

void CheckHangTimeout(const std::string& name, const char* op, const GroupOptions& options) {
  const auto hang = options.hang_timeout;
  if (hang.count() != 0 && hang < kMinHangTimeout) {
    Fail(name, op,
         absl::StrCat("GroupOptions::hang_timeout is ", hang.count(),
                      " ms; use 0 (off) or at least ", kMinHangTimeout.count(), " ms"));
  }
}

// Connects this process as `rank` and registers the group. `incarnation` tells declared groups
// apart from an earlier declaration of the same name.
std::shared_ptr<Group> Join(int world_size, int rank, Backend backend, const std::string& name,
                            const GroupOptions& options, const std::string& incarnation) {
  const char* op = "init";
  CheckName(name, op);
  CheckHangTimeout(name, op, options);
  if (world_size < 1) Fail(name, op, absl::StrCat("world size ", world_size, " must be >= 1"));
  if (rank < 0 || rank >= world_size) {
    Fail(name, op, absl::StrCat("rank ", rank, " is outside [0, ", world_size, ")"));
  }
  if (backend == Backend::kNccl && nccl_factory == nullptr) {
    Fail(name, op,
         "this build of troupe has no NCCL backend (it was built without the CUDA toolkit, or "
         "with --config=nocuda); use Backend::kCpu or rebuild with CUDA");
  }
  ::troupe::internal::Runtime& runtime = RuntimeFor(name, op);
  MeshOptions mesh_options;
  mesh_options.group = name;
  mesh_options.world_size = world_size;
  mesh_options.rank = rank;
  mesh_options.key_prefix =
      absl::StrCat("collective/", name, "/", incarnation, incarnation.empty() ? "" : "/");
  mesh_options.listen_ip = runtime.NodeIp();
  mesh_options.data_links = backend == Backend::kCpu;
  mesh_options.force_tcp = options.transport == Transport::kTcp;
  mesh_options.rendezvous_timeout = absl::Milliseconds(options.rendezvous_timeout.count());
  mesh_options.hang_timeout = absl::Milliseconds(options.hang_timeout.count());
  const absl::Time deadline = absl::Now() + mesh_options.rendezvous_timeout;
  auto mesh = Mesh::Connect(mesh_options, KvOf(runtime));
  if (!mesh.ok()) {
    ThrowCollectiveError(name, op,
                         PeerError(mesh.status().code(), PeerOf(mesh.status()),
                                   absl::StrCat("collective group '", name, "' rank ", rank,
                                                " could not join: ", mesh.status().message())));
  }
  std::unique_ptr<CommBackend> comm;
  if (backend == Backend::kCpu) {
    // Device buffers are staged through pinned host memory (a CUDA build in a process that
    // uses CUDA); host buffers go straight to the CPU backend.
    comm = std::make_unique<StagingBackend>(std::make_unique<CpuBackend>(std::move(*mesh)),
                                            ProcessDeviceMemory(), rank, world_size);
  } else {
    auto made = (*nccl_factory)(std::move(*mesh), deadline);
    if (!made.ok()) {
      ThrowCollectiveError(
          name, op,
          PeerError(made.status().code(), PeerOf(made.status()),
                    absl::StrCat("collective group '", name, "' rank ", rank,
                                 ": NCCL setup failed: ", made.status().message())));
    }
    comm = std::move(*made);
  }
  return std::make_shared<Group>(name, rank, world_size, options, incarnation, std::move(comm));
}

struct Declaration {
  std::string incarnation;
  Backend backend = Backend::kCpu;
  int world_size = 0;
  int rank = -1;  // of the actor that read it; -1 if it is not a member
  GroupOptions options;
};

// The driver's declaration of group `name`, as seen by the actor `actor_id` (hex).
std::optional<Declaration> ReadDeclaration(::troupe::internal::Runtime& runtime,
                                           const std::string& name, const std::string& actor_id) {
  auto value = runtime.KvGet(runtime.JobNamespace(), DeclarationKey(name));
  if (!value) return std::nullopt;
  std::vector<std::string> lines = absl::StrSplit(*value, '\n');
  Declaration declaration;
  int backend = 0, transport = 0;
  int64_t timeout_ms = 0, rendezvous_ms = 0;
  if (lines.size() < 6 || !absl::SimpleAtoi(lines[1], &backend) ||
      !absl::SimpleAtoi(lines[2], &declaration.world_size) ||
      !absl::SimpleAtoi(lines[3], &timeout_ms) || !absl::SimpleAtoi(lines[4], &rendezvous_ms) ||
      !absl::SimpleAtoi(lines[5], &transport)) {
    return std::nullopt;
  }
  declaration.incarnation = lines[0];
  declaration.backend = static_cast<Backend>(backend);
  declaration.options.timeout = std::chrono::milliseconds(timeout_ms);
  declaration.options.rendezvous_timeout = std::chrono::milliseconds(rendezvous_ms);
  declaration.options.transport = static_cast<Transport>(transport);
  for (size_t i = 6; i < lines.size(); ++i) {
    std::vector<std::string> member = absl::StrSplit(lines[i], ' ');
    if (member.size() == 2 && member[0] == actor_id) absl::SimpleAtoi(member[1], &declaration.rank);
    int64_t hang_ms = 0;  // a trailing "hang_timeout_ms <n>" line (older readers skip it)
    if (member.size() == 2 && member[0] == "hang_timeout_ms" &&
        absl::SimpleAtoi(member[1], &hang_ms)) {
      declaration.options.hang_timeout = std::chrono::milliseconds(hang_ms);
    }
  }
  return declaration;
}

// The group `name` of this process. Inside an actor, a group declared by the driver is joined
// here on first use, and joined afresh when the driver declared it again after a failure.
std::shared_ptr<Group> FindGroup(const std::string& name, const char* op) {
  std::shared_ptr<Group> existing;
  {
    absl::MutexLock lock(&groups_mu);
    auto it = groups->find(name);
    if (it != groups->end()) existing = it->second;
  }
  if (existing && (existing->incarnation().empty() || !existing->broken())) return existing;
  ::troupe::internal::Runtime& runtime = RuntimeFor(name, op);
  const std::string actor_id = runtime.CurrentActorId();
  std::optional<Declaration> declaration;
  if (!actor_id.empty()) declaration = ReadDeclaration(runtime, name, HexOf(actor_id));
  if (existing && (!declaration || declaration->incarnation == existing->incarnation())) {
    return existing;  // broken, and not declared again: its operations report why
  }
  if (!declaration || declaration->rank < 0) {
    Fail(name, op,
         "this process is not a member: call InitGroup(world_size, rank, backend, \"" + name +
             "\") here first, or CreateGroup(...) on the driver with this actor in it");
  }
  existing.reset();
  {
    absl::MutexLock lock(&groups_mu);
    groups->erase(name);  // the broken earlier incarnation leaves (its peers already failed)
  }
  auto group = Join(declaration->world_size, declaration->rank, declaration->backend, name,
                    declaration->options, declaration->incarnation);
  absl::MutexLock lock(&groups_mu);
  (*groups)[name] = group;
  return group;
}

void CheckCount(const std::string& group, const char* op, const void* data, size_t count) {
  if (data == nullptr && count > 0) Fail(group, op, "the buffer is null");
}

// The backend's check of a buffer's memory (NCCL: GPU memory only); refused buffers fail the
// call, not the group.
void CheckMemory(const Group& group, const char* op, const void* data) {
  absl::Status status = group.CheckBuffer(data, CallName(op));
  if (!status.ok()) throw CollectiveError(std::string(status.message()), group.name(), op, -1);
}

void CheckRank(const std::string& group, const char* op, const char* what, int value, int world) {
  if (value < 0 || value >= world) {
    Fail(group, op, absl::StrCat(what, " ", value, " is outside [0, ", world, ")"));
  }
}

}  // namespace

void RegisterNcclFactory(NcclFactory factory) {
  nccl_factory = new NcclFactory(std::move(factory));
}
const NcclFactory* GetNcclFactory() { return nccl_factory; }

void Work::Wait() {
  if (!state_) throw CollectiveError("Wait() on an empty Work", "", "wait", -1);
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->failed) {
    throw CollectiveError(state_->message, state_->group, state_->op, state_->rank);
  }
}

bool Work::IsCompleted() const {
  if (!state_) return true;
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->done;
}

void InitGroup(int world_size, int rank, Backend backend, const std::string& name,
               const GroupOptions& options) {
  {
    absl::MutexLock lock(&groups_mu);
    if (groups->count(name)) {
      Fail(name, "init",
           "already initialized in this process; DestroyGroup(\"" + name +
               "\") first to create it again");
    }
  }
  auto group = Join(world_size, rank, backend, name, options, "");
  absl::MutexLock lock(&groups_mu);
  (*groups)[name] = group;
}

void DestroyGroup(const std::string& name) {
  std::shared_ptr<Group> group;
  {
    absl::MutexLock lock(&groups_mu);
    auto it = groups->find(name);
    if (it != groups->end()) {
      group = std::move(it->second);
      groups->erase(it);
    }
  }
  group.reset();  // leaves: peers' pending operations fail
  ::troupe::internal::Runtime* runtime = ::troupe::internal::CurrentRuntime();
  if (runtime != nullptr && runtime->CurrentActorId().empty()) {
    // The driver (or a task): withdraw a declaration and any rendezvous keys left behind.
    runtime->KvDelete(runtime->JobNamespace(), "collective/" + name + "/", /*by_prefix=*/true);
  }
}

bool IsGroupInitialized(const std::string& name) {
  absl::MutexLock lock(&groups_mu);
  return groups->count(name) > 0;
}

int GetRank(const std::string& name) { return FindGroup(name, "get_rank")->rank(); }
int GetWorldSize(const std::string& name) {
  return FindGroup(name, "get_world_size")->world_size();
}

namespace internal {
void DeclareGroup(const std::vector<std::string>& actor_ids, const std::vector<int>& ranks,
                  Backend backend, const std::string& name, const GroupOptions& options) {
  const char* op = "create";
  CheckName(name, op);
  CheckHangTimeout(name, op, options);
  if (actor_ids.empty()) Fail(name, op, "no actors given");
  if (actor_ids.size() != ranks.size()) {
    Fail(name, op,
         absl::StrCat(actor_ids.size(), " actors but ", ranks.size(),
                      " ranks: give one rank per actor"));
  }
  std::vector<bool> seen(actor_ids.size());
  for (int rank : ranks) {
    if (rank < 0 || rank >= static_cast<int>(ranks.size()) || seen[rank]) {
      Fail(name, op,
           absl::StrCat("ranks must be 0..", ranks.size() - 1, ", each exactly once (got ", rank,
                        ")"));
    }
    seen[rank] = true;
  }
  if (backend == Backend::kNccl && nccl_factory == nullptr) {
    Fail(name, op, "this build of troupe has no NCCL backend; use Backend::kCpu");
  }
  ::troupe::internal::Runtime& runtime = RuntimeFor(name, op);
  std::random_device random;
  std::string value = absl::StrCat(
      absl::Hex(random(), absl::kZeroPad8), absl::Hex(random(), absl::kZeroPad8), "\n",
      static_cast<int>(backend), "\n", actor_ids.size(), "\n", options.timeout.count(), "\n",
      options.rendezvous_timeout.count(), "\n", static_cast<int>(options.transport));
  for (size_t i = 0; i < actor_ids.size(); ++i) {
    if (actor_ids[i].empty()) Fail(name, op, "actor handle " + std::to_string(i) + " is empty");
    absl::StrAppend(&value, "\n", HexOf(actor_ids[i]), " ", ranks[i]);
  }
  absl::StrAppend(&value, "\nhang_timeout_ms ", options.hang_timeout.count());
  // A new declaration replaces an old one; its members join afresh (new incarnation).
  runtime.KvDelete(runtime.JobNamespace(), "collective/" + name + "/", /*by_prefix=*/true);
  runtime.KvPut(runtime.JobNamespace(), DeclarationKey(name), value, /*overwrite=*/true);
}
}  // namespace internal

// --- Operations ----------------------------------------------------------------------------
// Each Prepare* checks the arguments and binds them; the sync form runs it, the async one starts
// it.

namespace {

struct Prepared {
  std::shared_ptr<Group> group;
  OpCode op;
  Group::Operation operation;
};

void RunNow(Prepared prepared, const CallOptions& call) {
  prepared.group->Run(prepared.op, call, std::move(prepared.operation));
}

Work StartNow(Prepared prepared, const CallOptions& call) {
  return prepared.group->Start(prepared.op, call, std::move(prepared.operation));
}

Prepared PrepareAllReduce(void* data, size_t count, DataType dtype, ReduceOp op,
                          const std::string& name) {
  auto group = FindGroup(name, "allreduce");
  CheckCount(name, "allreduce", data, count);
  CheckMemory(*group, "allreduce", data);
  return {group, OpCode::kAllReduce, [=](CommBackend& backend, const OpContext& ctx) {
            return backend.AllReduce(data, count, dtype, op, ctx);
          }};
}

Prepared PrepareAllGather(const void* send, void* recv, size_t count, DataType dtype,
                          const std::string& name) {
  auto group = FindGroup(name, "allgather");
  CheckCount(name, "allgather", send, count);
  CheckMemory(*group, "allgather", send);
  CheckCount(name, "allgather", recv, count);
  CheckMemory(*group, "allgather", recv);
  return {group, OpCode::kAllGather, [=](CommBackend& backend, const OpContext& ctx) {
            return backend.AllGather(send, recv, count, dtype, ctx);
          }};
}

Prepared PrepareReduceScatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                              ReduceOp op, const std::string& name) {
  auto group = FindGroup(name, "reduce_scatter");
  CheckCount(name, "reduce_scatter", send, recv_count);
  CheckMemory(*group, "reduce_scatter", send);
  CheckCount(name, "reduce_scatter", recv, recv_count);
  CheckMemory(*group, "reduce_scatter", recv);
  return {group, OpCode::kReduceScatter, [=](CommBackend& backend, const OpContext& ctx) {
            return backend.ReduceScatter(send, recv, recv_count, dtype, op, ctx);
          }};
}

Prepared PrepareBroadcast(void* data, size_t count, DataType dtype, int root,
                          const std::string& name) {
  auto group = FindGroup(name, "broadcast");
  CheckCount(name, "broadcast", data, count);
  CheckMemory(*group, "broadcast", data);
  CheckRank(name, "broadcast", "root", root, group->world_size());
  return {group, OpCode::kBroadcast, [=](CommBackend& backend, const OpContext& ctx) {
            return backend.Broadcast(data, count, dtype, root, ctx);
          }};
}

Prepared PrepareReduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
                       const std::string& name) {
  auto group = FindGroup(name, "reduce");
  CheckCount(name, "reduce", data, count);
  CheckMemory(*group, "reduce", data);
  CheckRank(name, "reduce", "root", root, group->world_size());
  return {group, OpCode::kReduce, [=](CommBackend& backend, const OpContext& ctx) {
            return backend.Reduce(data, count, dtype, op, root, ctx);
          }};
}

Prepared PrepareBarrier(const std::string& name) {
  return {FindGroup(name, "barrier"), OpCode::kBarrier,
          [](CommBackend& backend, const OpContext& ctx) { return backend.Barrier(ctx); }};
}

Prepared PrepareSend(const void* data, size_t count, DataType dtype, int peer,
                     const std::string& name) {
  auto group = FindGroup(name, "send");
  CheckCount(name, "send", data, count);
  CheckMemory(*group, "send", data);
  CheckRank(name, "send", "peer", peer, group->world_size());
  if (peer == group->rank()) Fail(name, "send", "a member cannot send to itself");
  return {group, OpCode::kSendRecv, [=](CommBackend& backend, const OpContext& ctx) {
            return backend.Send(data, count, dtype, peer, ctx);
          }};
}

Prepared PrepareRecv(void* data, size_t count, DataType dtype, int peer, const std::string& name) {
  auto group = FindGroup(name, "recv");
  CheckCount(name, "recv", data, count);
  CheckMemory(*group, "recv", data);
  CheckRank(name, "recv", "peer", peer, group->world_size());
  if (peer == group->rank()) Fail(name, "recv", "a member cannot receive from itself");
  return {group, OpCode::kSendRecv, [=](CommBackend& backend, const OpContext& ctx) {
            return backend.Recv(data, count, dtype, peer, ctx);
          }};
}

}  // namespace

void AllReduce(void* data, size_t count, DataType dtype, ReduceOp op, const std::string& group,
               const CallOptions& call) {
  RunNow(PrepareAllReduce(data, count, dtype, op, group), call);
}
void AllGather(const void* send, void* recv, size_t count, DataType dtype, const std::string& group,
               const CallOptions& call) {
  RunNow(PrepareAllGather(send, recv, count, dtype, group), call);
}
void ReduceScatter(const void* send, void* recv, size_t recv_count, DataType dtype, ReduceOp op,
                   const std::string& group, const CallOptions& call) {
  RunNow(PrepareReduceScatter(send, recv, recv_count, dtype, op, group), call);
}
void Broadcast(void* data, size_t count, DataType dtype, int root, const std::string& group,
               const CallOptions& call) {
  RunNow(PrepareBroadcast(data, count, dtype, root, group), call);
}
void Reduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
            const std::string& group, const CallOptions& call) {
  RunNow(PrepareReduce(data, count, dtype, op, root, group), call);
}
void Barrier(const std::string& group, const CallOptions& call) {
  RunNow(PrepareBarrier(group), call);
}
void Send(const void* data, size_t count, DataType dtype, int peer, const std::string& group,
          const CallOptions& call) {
  RunNow(PrepareSend(data, count, dtype, peer, group), call);
}
void Recv(void* data, size_t count, DataType dtype, int peer, const std::string& group,
          const CallOptions& call) {
  RunNow(PrepareRecv(data, count, dtype, peer, group), call);
}

Work AllReduceAsync(void* data, size_t count, DataType dtype, ReduceOp op, const std::string& group,
                    const CallOptions& call) {
  return StartNow(PrepareAllReduce(data, count, dtype, op, group), call);
}
Work AllGatherAsync(const void* send, void* recv, size_t count, DataType dtype,
                    const std::string& group, const CallOptions& call) {
  return StartNow(PrepareAllGather(send, recv, count, dtype, group), call);
}
Work ReduceScatterAsync(const void* send, void* recv, size_t recv_count, DataType dtype,
                        ReduceOp op, const std::string& group, const CallOptions& call) {
  return StartNow(PrepareReduceScatter(send, recv, recv_count, dtype, op, group), call);
}
Work BroadcastAsync(void* data, size_t count, DataType dtype, int root, const std::string& group,
                    const CallOptions& call) {
  return StartNow(PrepareBroadcast(data, count, dtype, root, group), call);
}
Work ReduceAsync(void* data, size_t count, DataType dtype, ReduceOp op, int root,
                 const std::string& group, const CallOptions& call) {
  return StartNow(PrepareReduce(data, count, dtype, op, root, group), call);
}
Work BarrierAsync(const std::string& group, const CallOptions& call) {
  return StartNow(PrepareBarrier(group), call);
}
Work SendAsync(const void* data, size_t count, DataType dtype, int peer, const std::string& group,
               const CallOptions& call) {
  return StartNow(PrepareSend(data, count, dtype, peer, group), call);
}
Work RecvAsync(void* data, size_t count, DataType dtype, int peer, const std::string& group,
               const CallOptions& call) {
  return StartNow(PrepareRecv(data, count, dtype, peer, group), call);
}

}  // namespace troupe::collective
