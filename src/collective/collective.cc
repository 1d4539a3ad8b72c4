// The public collective API (troupe/collective.h): the process's groups by name, group
// declarations from the driver (CreateGroup), and argument checks in front of the Group.
#include <unistd.h>

#include <map>
#include <random>
#include <set>

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
                            const GroupOptions& options, const std::string& incarnation,
                            int64_t generation = 0, bool elastic = false) {
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
  return std::make_shared<Group>(name, rank, world_size, options, incarnation, std::move(comm),
                                 generation, elastic);
}

// A declaration in the KV: lines "incarnation", backend, world size, timeout ms, rendezvous ms,
// transport, then one "<actor id hex> <rank>" per member, then "hang_timeout_ms <n>" and
// "generation <n> <elastic 0|1>" lines, which older readers skip as members no actor is.
struct Declaration {
  std::string incarnation;
  Backend backend = Backend::kCpu;
  int world_size = 0;
  int rank = -1;  // of the actor that read it; -1 if it is not a member
  GroupOptions options;
  int64_t generation = 0;  // 0: written before generations existed
  bool elastic = false;
  std::vector<std::pair<std::string, int>> members;  // actor id hex, rank
};

std::optional<Declaration> ParseDeclaration(const std::string& value, const std::string& actor_id) {
  std::vector<std::string> lines = absl::StrSplit(value, '\n');
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
    std::vector<std::string> fields = absl::StrSplit(lines[i], ' ');
    if (fields.size() == 3 && fields[0] == "generation") {
      int elastic = 0;
      absl::SimpleAtoi(fields[1], &declaration.generation);
      absl::SimpleAtoi(fields[2], &elastic);
      declaration.elastic = elastic == 1;
      continue;
    }
    int64_t hang_ms = 0;  // a trailing "hang_timeout_ms <n>" line (older readers skip it)
    if (fields.size() == 2 && fields[0] == "hang_timeout_ms") {
      if (absl::SimpleAtoi(fields[1], &hang_ms)) {
        declaration.options.hang_timeout = std::chrono::milliseconds(hang_ms);
      }
      continue;
    }
    int rank = -1;
    if (fields.size() != 2 || !absl::SimpleAtoi(fields[1], &rank)) continue;
    declaration.members.emplace_back(fields[0], rank);
    if (fields[0] == actor_id) declaration.rank = rank;
  }
  return declaration;
}

// The driver's declaration of group `name`, as seen by the actor `actor_id` (hex).
std::optional<Declaration> ReadDeclaration(::troupe::internal::Runtime& runtime,
                                           const std::string& name, const std::string& actor_id) {
  auto value = runtime.KvGet(runtime.JobNamespace(), DeclarationKey(name));
  if (!value) return std::nullopt;
  return ParseDeclaration(*value, actor_id);
}

[[noreturn]] void ThrowExcluded(const std::string& name, const char* op, const Declaration& newest,
                                int64_t held) {
  throw ExcludedError(
      absl::StrCat("collective group '", name, "' ", op, ": this member was excluded: generation ",
                   newest.generation, " of the group (", newest.world_size,
                   " members) leaves it out",
                   held > 0 ? absl::StrCat(" (it held generation ", held, ")") : "",
                   ". The group's creator declared it again without this member (it was reported "
                   "failed, hung or cut off); it must not take part any more: stop, or join as a "
                   "new member"),
      name, op, newest.generation);
}

// The incarnation of each declared group this process last tried to join, by name (a failed
// join is not retried: its peers gave up on it too).
auto* tried_incarnations ABSL_GUARDED_BY(groups_mu) = new std::map<std::string, std::string>();

// Leaves the held `name` (if any) and joins `declaration` in its place.
std::shared_ptr<Group> Rejoin(const std::string& name, const Declaration& declaration) {
  std::shared_ptr<Group> old;
  {
    absl::MutexLock lock(&groups_mu);
    auto it = groups->find(name);
    if (it != groups->end()) {
      old = std::move(it->second);
      groups->erase(it);
    }
    (*tried_incarnations)[name] = declaration.incarnation;
  }
  old.reset();  // outside the lock: leaving aborts the old connections and joins its thread
  auto group =
      Join(declaration.world_size, declaration.rank, declaration.backend, name, declaration.options,
           declaration.incarnation, declaration.generation, declaration.elastic);
  absl::MutexLock lock(&groups_mu);
  (*groups)[name] = group;
  return group;
}

// The group `name` of this process. Inside an actor, a group declared by the driver is joined
// here on first use, and — unless declared elastic — joined afresh when the driver declared it
// again after a failure.
std::shared_ptr<Group> FindGroup(const std::string& name, const char* op) {
  std::shared_ptr<Group> existing;
  {
    absl::MutexLock lock(&groups_mu);
    auto it = groups->find(name);
    if (it != groups->end()) existing = it->second;
  }
  if (existing && (existing->incarnation().empty() || !existing->broken())) return existing;
  // Elastic groups move on only through RefreshGroup: an operation started mid-step on a broken
  // one must fail (and be redone by its caller), never land on the next generation.
  if (existing && existing->elastic()) return existing;
  ::troupe::internal::Runtime& runtime = RuntimeFor(name, op);
  const std::string actor_id = runtime.CurrentActorId();
  std::optional<Declaration> declaration;
  if (!actor_id.empty()) declaration = ReadDeclaration(runtime, name, HexOf(actor_id));
  if (existing && (!declaration || declaration->incarnation == existing->incarnation())) {
    return existing;  // broken, and not declared again: its operations report why
  }
  if (existing && declaration->rank < 0) {
    ThrowExcluded(name, op, *declaration, existing->generation());
  }
  if (!declaration || declaration->rank < 0) {
    Fail(name, op,
         "this process is not a member: call InitGroup(world_size, rank, backend, \"" + name +
             "\") here first, or CreateGroup(...) on the driver with this actor in it");
  }
  existing.reset();
  return Rejoin(name, *declaration);
}

// After an operation on `group` failed: if the group was declared and a newer generation leaves
// this member out, the member was excluded — say so (ExcludedError) rather than name the peers
// that left it. One KV read, on failures only.
void CheckExcluded(const std::string& name, const char* op) {
  std::shared_ptr<Group> held;
  {
    absl::MutexLock lock(&groups_mu);
    auto it = groups->find(name);
    if (it != groups->end()) held = it->second;
  }
  if (!held || held->incarnation().empty()) return;
  ::troupe::internal::Runtime* runtime = ::troupe::internal::CurrentRuntime();
  if (runtime == nullptr || runtime->CurrentActorId().empty()) return;
  std::optional<Declaration> newest;
  try {
    newest = ReadDeclaration(*runtime, name, HexOf(runtime->CurrentActorId()));
  } catch (const TroupeError&) {
    return;  // the KV cannot say: the operation's own error stands
  }
  if (newest && newest->incarnation != held->incarnation() &&
      newest->generation > held->generation() && newest->rank < 0) {
    ThrowExcluded(name, op, *newest, held->generation());
  }
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
    CollectiveError error(state_->message, state_->group, state_->op, state_->rank);
    lock.unlock();
    if (error.rank() >= 0) CheckExcluded(error.group(), error.op().c_str());
    throw error;
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
    tried_incarnations->erase(name);
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
int64_t GetGeneration(const std::string& name) {
  return FindGroup(name, "get_generation")->generation();
}
int GetWorldSize(const std::string& name) {
  return FindGroup(name, "get_world_size")->world_size();
}

namespace internal {
int64_t DeclareGroup(const std::vector<std::string>& actor_ids, const std::vector<int>& ranks,
                     Backend backend, const std::string& name, const GroupOptions& options,
                     int64_t generation, bool elastic) {
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
  const std::string ns = runtime.JobNamespace();
  std::optional<Declaration> previous;
  if (auto value = runtime.KvGet(ns, DeclarationKey(name))) previous = ParseDeclaration(*value, "");
  const int64_t current = previous ? previous->generation : 0;
  if (generation == 0) generation = current + 1;
  if (generation <= current) {
    Fail(name, op,
         absl::StrCat("generation ", generation, " is not newer than the current declaration's (",
                      current, "): generations only grow"));
  }
  std::random_device random;
  std::string value = absl::StrCat(
      absl::Hex(random(), absl::kZeroPad8), absl::Hex(random(), absl::kZeroPad8), "\n",
      static_cast<int>(backend), "\n", actor_ids.size(), "\n", options.timeout.count(), "\n",
      options.rendezvous_timeout.count(), "\n", static_cast<int>(options.transport));
  std::set<std::string> members;
  for (size_t i = 0; i < actor_ids.size(); ++i) {
    if (actor_ids[i].empty()) Fail(name, op, "actor handle " + std::to_string(i) + " is empty");
    members.insert(HexOf(actor_ids[i]));
    absl::StrAppend(&value, "\n", HexOf(actor_ids[i]), " ", ranks[i]);
  }
  absl::StrAppend(&value, "\nhang_timeout_ms ", options.hang_timeout.count());
  absl::StrAppend(&value, "\ngeneration ", generation, " ", elastic ? 1 : 0);
  // A new declaration replaces an old one; its members join afresh (new incarnation).
  runtime.KvDelete(ns, "collective/" + name + "/", /*by_prefix=*/true);
  if (previous) {
    // Members still joining the previous declaration would wait for members that never come
    // (left out, or moved on to this one): mark every rank of it failed in its rendezvous (the
    // mesh's failure-report format, mesh.h), so they fail at once instead of waiting out the
    // rendezvous timeout. Members already joined do not read these keys.
    for (const auto& [actor, rank] : previous->members) {
      runtime.KvPut(ns,
                    absl::StrCat("collective/", name, "/", previous->incarnation, "/rank/", rank),
                    absl::StrCat("FAILED\n", rank, "\n",
                                 members.count(actor)
                                     ? absl::StrCat("generation ", generation, " replaced this one")
                                     : absl::StrCat("excluded by the group's creator: generation ",
                                                    generation, " leaves it out")),
                    /*overwrite=*/true);
    }
  }
  runtime.KvPut(ns, DeclarationKey(name), value, /*overwrite=*/true);
  return generation;
}

int64_t DeclaredGeneration(const std::string& name) {
  ::troupe::internal::Runtime& runtime = RuntimeFor(name, "get_generation");
  auto value = runtime.KvGet(runtime.JobNamespace(), DeclarationKey(name));
  if (!value) return 0;
  auto declaration = ParseDeclaration(*value, "");
  return declaration ? declaration->generation : 0;
}

int64_t RefreshGroup(const std::string& name, int64_t* joining) {
  const char* op = "refresh";
  ::troupe::internal::Runtime& runtime = RuntimeFor(name, op);
  const std::string actor_id = runtime.CurrentActorId();
  if (actor_id.empty()) Fail(name, op, "only an actor member of a declared group can refresh it");
  std::shared_ptr<Group> held;
  std::string tried;
  {
    absl::MutexLock lock(&groups_mu);
    auto it = groups->find(name);
    if (it != groups->end()) held = it->second;
    auto t = tried_incarnations->find(name);
    if (t != tried_incarnations->end()) tried = t->second;
  }
  std::optional<Declaration> newest = ReadDeclaration(runtime, name, HexOf(actor_id));
  if (!newest || (held && newest->incarnation == held->incarnation()) ||
      newest->incarnation == tried) {
    if (held) return held->generation();
    if (!newest) Fail(name, op, "the group is not declared (CreateGroup on the driver)");
    Fail(name, op,
         absl::StrCat("joining generation ", newest->generation,
                      " failed and no newer one is declared yet: refresh again once it is"));
  }
  if (newest->rank < 0) {
    held.reset();
    {
      absl::MutexLock lock(&groups_mu);
      auto it = groups->find(name);
      if (it != groups->end()) {
        held = std::move(it->second);
        groups->erase(it);
      }
    }
    const int64_t held_generation = held ? held->generation() : 0;
    held.reset();  // leave the old generation too: it is over
    ThrowExcluded(name, op, *newest, held_generation);
  }
  held.reset();
  if (joining != nullptr) *joining = newest->generation;
  return Rejoin(name, *newest)->generation();
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
  try {
    prepared.group->Run(prepared.op, call, std::move(prepared.operation));
  } catch (const CollectiveError& e) {
    if (e.rank() >= 0) CheckExcluded(prepared.group->name(), OpName(prepared.op));
    throw;
  }
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
