#include "src/core_worker/object_service.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/common/logging.h"

namespace troupe {
namespace {

StoredObject FromStatusReply(const rpc::GetObjectStatusReply& reply) {
  StoredObject object;
  object.value = reply.object();
  object.copy_raylet_addresses.assign(reply.copy_raylet_addresses().begin(),
                                      reply.copy_raylet_addresses().end());
  if (reply.status() == rpc::GetObjectStatusReply::FAILED) {
    object.error = reply.object().is_application_error()
                       ? StoredObject::Error::kApplication
                       : static_cast<StoredObject::Error>(reply.error_kind());
    if (object.error == StoredObject::Error::kNone ||
        reply.error_kind() > rpc::GetObjectStatusReply::OUT_OF_MEMORY) {
      object.error = StoredObject::Error::kTaskFailed;  // an owner that did not say (or newer)
    }
    object.error_message = reply.object().error_message();
  }
  return object;
}

}  // namespace

ObjectService::ObjectService(Options options, ClientPool<RayletClient>* raylets,
                             ClientPool<CoreWorkerClient>* workers, const Clock* clock)
    : options_(std::move(options)),
      raylets_(raylets),
      workers_(workers),
      clock_(clock),
      raylet_(raylets->Get(options_.raylet_address)),
      references_(
          [this](const ObjectId& id, std::vector<ObjectRefInfo> contained) {
            OnOwnedFree(id, std::move(contained));
          },
          [this](const ObjectId& id, const std::string& owner, bool owner_knows) {
            OnBorrowedRelease(id, owner, owner_knows);
          }) {}

ObjectService::~ObjectService() { Shutdown(); }

void ObjectService::SetIdentity(const std::string& address, const NodeId& node_id) {
  address_ = address;
  node_id_ = node_id;
  references_.SetSelfAddress(address);
}

void ObjectService::Shutdown() {
  memory_store_.ExpireWaiters(absl::InfiniteFuture());
  std::vector<std::function<void()>> watches;
  {
    absl::MutexLock lock(&queries_mu_);
    shut_down_ = true;
    for (auto& [query, cancel] : watch_cancels_) watches.push_back(std::move(cancel));
    watch_cancels_.clear();
  }
  for (auto& cancel : watches) cancel();  // their callbacks still run (and ask no more)
  {
    // Wait cancels its owner queries when it returns; their callbacks still run.
    absl::MutexLock lock(&queries_mu_);
    auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queries_mu_) {
      return queries_in_flight_ == 0;
    };
    if (!queries_mu_.AwaitWithTimeout(absl::Condition(&drained), absl::Seconds(5))) {
      TROUPE_LOG(Warning) << queries_in_flight_ << " owner queries still in flight at shutdown";
    }
  }
  absl::MutexLock lock(&mappings_mu_);
  for (const WriteMapping& mapping : write_mappings_) {
    munmap(mapping.address, mapping.size);
    close(mapping.fd);
  }
  write_mappings_.clear();
}

void ObjectService::OnOwnedFree(const ObjectId& id, std::vector<ObjectRefInfo> contained) {
  std::optional<StoredObject> object = memory_store_.GetIfReady(id);
  memory_store_.Erase(id);
  if (object && object->value.in_plasma()) {
    for (const auto& copy : object->copy_raylet_addresses) {
      raylets_->Get(copy)->FreeObjectsAsync({id.Binary()});
    }
  }
  for (const auto& inner : contained) references_.RemoveLocal(inner.id);
  if (reconstructor_ != nullptr) reconstructor_->ReleaseLineage(id);
}

void ObjectService::OnCopiesLost(const ObjectId& id, const StoredObject& seen,
                                 const std::string& why) {
  {
    absl::MutexLock lock(&lost_mu_);
    std::optional<StoredObject> current = memory_store_.GetIfReady(id);
    // Rebuilt or failed meanwhile, or another reader is rebuilding it: just read again.
    if (!current || current->error != StoredObject::Error::kNone ||
        current->copy_raylet_addresses != seen.copy_raylet_addresses ||
        current->value.raylet_address() != seen.value.raylet_address()) {
      return;
    }
    memory_store_.Erase(id);
  }
  if (reconstructor_ != nullptr) {
    reconstructor_->Reconstruct(id, why);
    return;
  }
  StoredObject lost;
  lost.error = StoredObject::Error::kLost;
  lost.error_message = absl::StrCat("object ", id.Hex(), " ", why);
  memory_store_.Put(id, std::move(lost));
}

GetResult ObjectService::ExplainBorrowedLoss(const ObjectRefInfo& ref, GetResult lost) {
  auto reply =
      workers_->Get(ref.owner_address)->GetObjectStatus(ref.id.Binary(), absl::ZeroDuration());
  if (!reply.ok() && (reply.status().code() == absl::StatusCode::kUnavailable ||
                      reply.status().code() == absl::StatusCode::kDeadlineExceeded)) {
    lost.error = StoredObject::Error::kOwnerDied;
    lost.error_message = absl::StrCat("object ", ref.id.Hex(), " is lost: its owner (at ",
                                      ref.owner_address, ") died or is unreachable (",
                                      reply.status().message(), "), and no copy of it can be read");
  }
  return lost;
}

void ObjectService::OnBorrowedRelease(const ObjectId& id, const std::string& owner,
                                      bool owner_knows) {
  memory_store_.Erase(id);
  if (owner_knows) workers_->Get(owner)->RemoveBorrowersAsync({id.Binary()}, address_);
}

absl::StatusOr<ObjectRefInfo> ObjectService::Put(size_t size,
                                                 const std::function<void(char*)>& write,
                                                 std::vector<ObjectRefInfo> contained) {
  const ObjectId id = ObjectId::FromIndex(put_task_id_, ++put_index_);
  StoredObject object;
  if (static_cast<int64_t>(size) <= options_.max_inline_bytes) {
    std::string bytes(size, '\0');
    write(bytes.data());
    object.value.set_inline_value(std::move(bytes));
  } else {
    auto stored = StoreTaskReturn(id, size, write, options_.worker_id.Binary(), node_id_.Binary());
    if (!stored.ok()) return stored.status();
    object.value = std::move(*stored);
    object.copy_raylet_addresses.push_back(options_.raylet_address);
  }
  object.value.set_object_id(id.Binary());
  const ObjectRefInfo ref{id, address_};
  references_.AddLocal(ref);
  if (!contained.empty()) references_.SetContained(id, std::move(contained));
  memory_store_.Put(id, std::move(object));
  return ref;
}

absl::StatusOr<rpc::ReturnObject> ObjectService::StoreTaskReturn(
    const ObjectId& id, size_t size, const std::function<void(char*)>& write,
    const std::string& owner_worker_id, const std::string& owner_node_id) {
  auto path = raylet_->CreateObject(id.Binary(), static_cast<int64_t>(size), /*primary=*/true,
                                    owner_worker_id, owner_node_id);
  // AlreadyExists: an earlier attempt of this task stored it on this node, sealed; that copy
  // is now the primary one (see ObjectStore::Create) and nothing needs writing.
  if (!path.ok() && path.status().code() != absl::StatusCode::kAlreadyExists) {
    return path.status();
  }
  if (path.ok()) {
    auto target = MapForWrite(*path, size);
    if (!target.ok()) return target.status();
    write(target->address);
    if (!target->cached && size > 0) munmap(target->address, size);
    if (auto status = raylet_->SealObject(id.Binary()); !status.ok()) return status;
  }
  rpc::ReturnObject ret;
  ret.set_object_id(id.Binary());
  ret.set_in_plasma(true);
  ret.set_node_id(node_id_.Binary());
  ret.set_raylet_address(options_.raylet_address);
  ret.set_size(static_cast<int64_t>(size));
  return ret;
}

namespace {
constexpr size_t kCachedMappingMinBytes = 8 << 20;
constexpr size_t kCachedMappingMaxTotal = 512 << 20;
}  // namespace

absl::StatusOr<ObjectService::WriteTarget> ObjectService::MapForWrite(const std::string& path,
                                                                      size_t size) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("stat ", path, ": ", std::strerror(errno)));
  }
  const bool cacheable = size >= kCachedMappingMinBytes;
  if (cacheable) {
    absl::MutexLock lock(&mappings_mu_);
    for (const WriteMapping& mapping : write_mappings_) {
      if (mapping.device == st.st_dev && mapping.inode == st.st_ino && mapping.size == size) {
        close(fd);  // the cached mapping keeps its own descriptor
        return WriteTarget{mapping.address, /*cached=*/true};
      }
    }
  }
  void* mapped =
      size == 0 ? nullptr
                : mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (mapped == MAP_FAILED) {
    close(fd);
    return absl::InternalError(absl::StrCat("mmap ", path, ": ", std::strerror(errno)));
  }
  if (!cacheable) {
    close(fd);
    return WriteTarget{static_cast<char*>(mapped), /*cached=*/false};
  }
  absl::MutexLock lock(&mappings_mu_);
  write_mappings_.push_back({st.st_dev, st.st_ino, size, static_cast<char*>(mapped), fd});
  size_t total = 0;
  for (const WriteMapping& mapping : write_mappings_) total += mapping.size;
  while (total > kCachedMappingMaxTotal && write_mappings_.size() > 1) {
    const WriteMapping& oldest = write_mappings_.front();
    munmap(oldest.address, oldest.size);
    close(oldest.fd);
    total -= oldest.size;
    write_mappings_.pop_front();
  }
  return WriteTarget{static_cast<char*>(mapped), /*cached=*/true};
}

void ObjectService::SetBlocked(bool blocked) {
  if (options_.is_driver || !executing_) return;
  // Best effort: if the raylet cannot be told, it only lends this worker's CPU a little later.
  if (blocked) {
    if (blocked_depth_++ == 0) (void)raylet_->NotifyBlocked(options_.worker_id.Binary(), true);
  } else {
    if (--blocked_depth_ == 0) (void)raylet_->NotifyBlocked(options_.worker_id.Binary(), false);
  }
}

absl::StatusOr<std::optional<StoredObject>> ObjectService::Resolve(const ObjectRefInfo& ref,
                                                                   absl::Time deadline) {
  if (auto ready = memory_store_.GetIfReady(ref.id)) return ready;
  if (references_.OwnedByMe(ref)) {
    if (!references_.IsTracked(ref.id)) {
      StoredObject lost;
      lost.error = StoredObject::Error::kLost;
      lost.error_message = absl::StrCat("object ", ref.id.Hex(), " was already freed");
      return std::optional<StoredObject>(lost);
    }
    return memory_store_.Wait(ref.id, deadline);
  }
  // Borrowed: ask the owner, in slices so a deadline far away still notices a dead owner.
  std::optional<StoredObject> result;
  absl::Status failure;
  while (true) {
    const absl::Duration wait =
        std::max(absl::ZeroDuration(), std::min(deadline - clock_->Now(), absl::Seconds(10)));
    auto reply = workers_->Get(ref.owner_address)->GetObjectStatus(ref.id.Binary(), wait);
    if (!reply.ok()) {
      StoredObject lost;
      lost.error = StoredObject::Error::kOwnerDied;
      lost.error_message =
          absl::StrCat("object ", ref.id.Hex(), " cannot be read: its owner (at ",
                       ref.owner_address, ") died or is unreachable: ", reply.status().message());
      result = lost;
      break;
    }
    if (reply->status() == rpc::GetObjectStatusReply::FREED) {
      StoredObject lost;
      lost.error = StoredObject::Error::kLost;
      lost.error_message = absl::StrCat("object ", ref.id.Hex(), " was freed by its owner");
      result = lost;
      break;
    }
    if (reply->status() != rpc::GetObjectStatusReply::PENDING) {
      result = FromStatusReply(*reply);
      if (references_.IsTracked(ref.id)) memory_store_.Put(ref.id, *result);  // cache
      break;
    }
    if (clock_->Now() >= deadline) break;
  }
  return result;
}

absl::StatusOr<ObjectBuffer> ObjectService::MapLocalObject(const ObjectId& id) {
  const std::string reader = options_.worker_id.Binary();
  auto objects = raylet_->GetObjects({id.Binary()}, reader);
  if (!objects.ok()) return objects.status();
  if (objects->empty() || !(*objects)[0].found()) {
    return absl::NotFoundError(absl::StrCat("object ", id.Hex(), " is not on this node"));
  }
  const rpc::LocalObject& local = (*objects)[0];
  std::shared_ptr<RayletClient> raylet = raylet_;
  const std::string binary = id.Binary();
  ObjectBuffer buffer;
  buffer.size = static_cast<size_t>(local.size());
  if (buffer.size == 0) {
    raylet->ReleaseObjectsAsync({binary}, reader);
    buffer.holder = std::make_shared<char>(0);
    buffer.data = static_cast<const char*>(buffer.holder.get());
    return buffer;
  }
  int fd = open(local.path().c_str(), O_RDONLY | O_CLOEXEC);
  void* mapped = fd < 0 ? MAP_FAILED : mmap(nullptr, buffer.size, PROT_READ, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  if (mapped == MAP_FAILED) {
    raylet->ReleaseObjectsAsync({binary}, reader);
    return absl::InternalError(
        absl::StrCat("cannot map ", local.path(), ": ", std::strerror(errno)));
  }
  const size_t size = buffer.size;
  buffer.data = static_cast<const char*>(mapped);
  // Unmapped and unpinned when the last reader lets go. The unpin is synchronous so the store
  // can reuse the memory at once (a put right after a read must not find it still pinned).
  buffer.holder = std::shared_ptr<const void>(mapped, [raylet, binary, size, reader](const void* p) {
    munmap(const_cast<void*>(p), size);
    (void)raylet->ReleaseObjects({binary}, reader);
  });
  return buffer;
}

GetResult ObjectService::Materialize(const ObjectRefInfo& ref, const StoredObject& object) {
  GetResult result;
  if (object.error != StoredObject::Error::kNone) {
    result.error = object.error;
    result.error_message = object.error_message;
    result.error_detail = object.value;
    return result;
  }
  if (!object.value.in_plasma()) {
    auto holder = std::make_shared<std::string>(object.value.inline_value());
    result.buffer = {holder->data(), holder->size(), holder};
    return result;
  }
  auto mapped = MapLocalObject(ref.id);
  if (mapped.status().code() == absl::StatusCode::kNotFound) {
    // Not on this node: copy it here from a node that has it.
    std::vector<std::string> sources = object.copy_raylet_addresses;
    if (sources.empty()) sources.push_back(object.value.raylet_address());
    // Not the copy here, and none on a node the GCS declared dead (it may be cut off and hang).
    sources.erase(std::remove_if(sources.begin(), sources.end(),
                                 [&](const std::string& source) {
                                   return source == options_.raylet_address ||
                                          IsDeadRaylet(source);
                                 }),
                  sources.end());
    // One transfer over every copy: the raylet moves on to the next copy if one fails midway.
    absl::Status fetched = sources.empty()
                               ? absl::NotFoundError("no copy to fetch from")
                               : raylet_->FetchObject(ref.id.Binary(), sources, absl::Minutes(10));
    // Only a copy that could not be had is lost; a full store here is not a loss.
    result.copies_lost =
        !fetched.ok() && fetched.code() != absl::StatusCode::kResourceExhausted;
    if (fetched.ok()) {
      if (references_.OwnedByMe(ref)) {
        memory_store_.AddCopy(ref.id, options_.raylet_address);
      } else {
        workers_->Get(ref.owner_address)
            ->AddObjectLocationAsync(ref.id.Binary(), options_.raylet_address, node_id_.Binary());
      }
      mapped = MapLocalObject(ref.id);
    } else {
      mapped = absl::NotFoundError(fetched.message());
    }
  }
  if (!mapped.ok()) {
    result.error = StoredObject::Error::kLost;
    std::string where = object.value.node_id().empty()
                            ? std::string()
                            : absl::StrCat(" on node ", BytesToHex(object.value.node_id()));
    result.error_message = absl::StrCat("object ", ref.id.Hex(), " is lost: its copies", where,
                                        " (raylet ", object.value.raylet_address(),
                                        ") cannot be read (", mapped.status().message(), ")");
    return result;
  }
  result.buffer = std::move(*mapped);
  return result;
}

absl::StatusOr<std::vector<GetResult>> ObjectService::Get(const std::vector<ObjectRefInfo>& refs,
                                                          absl::Time deadline) {
  std::vector<GetResult> results;
  results.reserve(refs.size());
  // A worker waiting here gives its CPUs back meanwhile, so the tasks it waits for can run.
  bool blocked = false;
  struct Unblock {
    ObjectService* worker;
    bool* blocked;
    ~Unblock() {
      if (*blocked) worker->SetBlocked(false);
    }
  } unblock{this, &blocked};
  for (const auto& ref : refs) {
    if (!blocked && !memory_store_.IsReady(ref.id)) {
      SetBlocked(true);
      blocked = true;
    }
    // A borrower reports a loss to the owner a few times at most (the owner may disagree).
    constexpr int kMaxLossReports = 3;
    int loss_reports = 0;
    while (true) {
      auto object = Resolve(ref, deadline);
      if (!object.ok()) return object.status();
      if (!object->has_value()) {
        return absl::DeadlineExceededError(
            absl::StrCat("object ", ref.id.Hex(), " was not ready before the timeout"));
      }
      GetResult result = Materialize(ref, **object);
      if (result.copies_lost && references_.OwnedByMe(ref)) {
        // Ours, and every copy is gone: rebuild it from lineage (or store why not), read again.
        const StoredObject& seen = **object;
        std::string where = seen.value.node_id().empty()
                                ? std::string("is lost: its only copy")
                                : absl::StrCat("is lost: its only copy was on node ",
                                               BytesToHex(seen.value.node_id()), " (raylet ",
                                               seen.value.raylet_address(), "), which");
        OnCopiesLost(ref.id, seen,
                     absl::StrCat(where, " died or cannot serve it (", result.error_message, ")"));
        continue;
      }
      if (result.copies_lost && ++loss_reports <= kMaxLossReports) {
        // Borrowed: drop our cached value and tell the owner, which rebuilds it if it is ours
        // to rebuild; then ask the owner again (that waits for the rebuilt value).
        const StoredObject& seen = **object;
        std::vector<std::string> lost = seen.copy_raylet_addresses;
        if (lost.empty()) lost.push_back(seen.value.raylet_address());
        memory_store_.Erase(ref.id);
        auto reported = workers_->Get(ref.owner_address)
                            ->GetObjectStatus(ref.id.Binary(), absl::ZeroDuration(), lost);
        if (reported.ok()) continue;
      }
      if (result.copies_lost) result = ExplainBorrowedLoss(ref, std::move(result));
      results.push_back(std::move(result));
      break;
    }
  }
  return results;
}

// What one Wait has seen so far, shared with the callbacks that report readiness (they may run
// after Wait returned; they then change nothing).
struct ObjectService::WaitState {
  absl::Mutex mu;
  absl::CondVar changed;
  absl::Time deadline;
  std::vector<bool> ready ABSL_GUARDED_BY(mu);
  size_t num_ready ABSL_GUARDED_BY(mu) = 0;
  // Borrowed objects whose owner has not answered the first (immediate) query yet: Wait reports
  // at least what the owners knew when it was called, as a single pass of queries would.
  size_t first_answers_pending ABSL_GUARDED_BY(mu) = 0;
  bool finished ABSL_GUARDED_BY(mu) = false;
  uint64_t next_query ABSL_GUARDED_BY(mu) = 0;
  absl::flat_hash_map<uint64_t, std::function<void()>> cancels ABSL_GUARDED_BY(mu);

  void MarkReady(size_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!ready[index]) {
      ready[index] = true;
      ++num_ready;
    }
    changed.SignalAll();
  }
};

std::vector<bool> ObjectService::Wait(const std::vector<ObjectRefInfo>& refs, int num_ready,
                                      absl::Time deadline) {
  std::vector<ObjectId> ids;
  bool all_owned = true;
  for (const auto& ref : refs) {
    ids.push_back(ref.id);
    all_owned &= references_.OwnedByMe(ref);
  }
  const size_t needed = std::min<size_t>(std::max(num_ready, 0), refs.size());
  if (all_owned) return memory_store_.WaitMany(ids, needed, deadline);

  // Some are borrowed: owned ones wake us through the memory store, borrowed ones through their
  // owners' long-polling GetObjectStatus.
  auto state = std::make_shared<WaitState>();
  state->deadline = deadline;
  {
    absl::MutexLock lock(&state->mu);
    state->ready.assign(refs.size(), false);
  }
  std::vector<std::pair<ObjectId, uint64_t>> store_waits;
  for (size_t i = 0; i < refs.size(); ++i) {
    const ObjectRefInfo& ref = refs[i];
    const bool owned = references_.OwnedByMe(ref);
    if (owned && !references_.IsTracked(ref.id) && !memory_store_.IsReady(ref.id)) {
      absl::MutexLock lock(&state->mu);  // freed already: a read would fail at once (lost)
      state->MarkReady(i);
      continue;
    }
    if (owned || memory_store_.IsReady(ref.id)) {
      const uint64_t handle = memory_store_.OnReady(ref.id, absl::InfiniteFuture(),
                                                    [state, i](std::optional<StoredObject> object) {
                                                      if (!object) return;
                                                      absl::MutexLock lock(&state->mu);
                                                      state->MarkReady(i);
                                                    });
      if (handle != 0) store_waits.emplace_back(ref.id, handle);
      continue;
    }
    {
      absl::MutexLock lock(&state->mu);
      ++state->first_answers_pending;
    }
    AskOwner(state, i, ref, absl::ZeroDuration());
  }

  std::vector<bool> ready;
  std::vector<std::function<void()>> cancels;
  {
    absl::MutexLock lock(&state->mu);
    bool timed_out = false;
    while (state->first_answers_pending > 0 ||
           (state->num_ready < needed && !timed_out && clock_->Now() < deadline)) {
      if (state->first_answers_pending > 0) {
        state->changed.Wait(&state->mu);
      } else {
        timed_out = state->changed.WaitWithDeadline(&state->mu, deadline);
      }
    }
    state->finished = true;
    ready = state->ready;
    for (auto& [id, cancel] : state->cancels) cancels.push_back(std::move(cancel));
    state->cancels.clear();
  }
  for (auto& cancel : cancels) cancel();
  for (const auto& [id, handle] : store_waits) memory_store_.CancelOnReady(id, handle);
  return ready;
}

void ObjectService::NotifyWhenReady(const ObjectRefInfo& ref, std::function<void()> ready) {
  if (references_.OwnedByMe(ref)) {
    if (!references_.IsTracked(ref.id) && !memory_store_.IsReady(ref.id)) {
      ready();  // freed already: a read fails at once (lost)
      return;
    }
    memory_store_.OnReady(ref.id, absl::InfiniteFuture(),
                          [ready = std::move(ready)](std::optional<StoredObject>) { ready(); });
    return;
  }
  if (memory_store_.IsReady(ref.id)) {
    ready();
    return;
  }
  {
    // One owner query per object, however many wait for it (an async actor's calls awaiting
    // the same argument): the first starts it, the rest join.
    absl::MutexLock lock(&queries_mu_);
    auto [waiting, first] = watch_waiters_.try_emplace(ref.id);
    waiting->second.push_back(std::move(ready));
    if (!first) return;
  }
  WatchOwner(ref, absl::ZeroDuration(), [this, id = ref.id] {
    std::vector<std::function<void()>> waiters;
    {
      absl::MutexLock lock(&queries_mu_);
      auto it = watch_waiters_.find(id);
      if (it == watch_waiters_.end()) return;
      waiters = std::move(it->second);
      watch_waiters_.erase(it);
    }
    for (auto& waiter : waiters) waiter();
  });
}

void ObjectService::WatchOwner(const ObjectRefInfo& ref, absl::Duration wait,
                               std::function<void()> ready) {
  uint64_t query;
  bool shut_down;
  {
    absl::MutexLock lock(&queries_mu_);
    shut_down = shut_down_;
    if (!shut_down) {
      ++queries_in_flight_;
      query = next_watch_++;
    }
  }
  if (shut_down) {
    ready();  // unlocked: it may take queries_mu_
    return;
  }
  auto on_answer = [this, ref, query,
                    ready = std::move(ready)](absl::StatusOr<rpc::GetObjectStatusReply> reply) {
    // Not ready only while PENDING; an owner that is gone or freed it makes a read fail (lost).
    const bool is_ready = !reply.ok() || reply->status() != rpc::GetObjectStatusReply::PENDING;
    if (reply.ok() && (reply->status() == rpc::GetObjectStatusReply::READY ||
                       reply->status() == rpc::GetObjectStatusReply::FAILED)) {
      if (references_.IsTracked(ref.id)) memory_store_.Put(ref.id, FromStatusReply(*reply));
    }
    {
      absl::MutexLock lock(&queries_mu_);
      if (watch_cancels_.erase(query) == 0) watches_answered_early_.insert(query);
    }
    if (is_ready) {
      ready();
    } else {
      WatchOwner(ref, absl::Seconds(10), ready);
    }
    absl::MutexLock lock(&queries_mu_);
    --queries_in_flight_;
  };
  std::function<void()> cancel =
      workers_->Get(ref.owner_address)
          ->GetObjectStatusAsync(ref.id.Binary(), wait, std::move(on_answer));
  {
    absl::MutexLock lock(&queries_mu_);
    if (watches_answered_early_.erase(query) > 0) return;  // its answer came already
    if (!shut_down_) {
      watch_cancels_[query] = std::move(cancel);
      return;
    }
  }
  cancel();  // Shutdown began meanwhile
}

void ObjectService::AskOwner(std::shared_ptr<WaitState> state, size_t index,
                             const ObjectRefInfo& ref, absl::Duration wait) {
  const bool first = wait == absl::ZeroDuration();
  uint64_t query;
  {
    absl::MutexLock lock(&state->mu);
    query = state->next_query++;
  }
  {
    absl::MutexLock lock(&queries_mu_);
    ++queries_in_flight_;
  }
  auto on_answer = [this, state, index, ref, first,
                    query](absl::StatusOr<rpc::GetObjectStatusReply> reply) {
    // Not ready only while PENDING; an owner that is gone or freed it makes a read fail (lost).
    const bool ready = !reply.ok() || reply->status() != rpc::GetObjectStatusReply::PENDING;
    if (reply.ok() && (reply->status() == rpc::GetObjectStatusReply::READY ||
                       reply->status() == rpc::GetObjectStatusReply::FAILED)) {
      if (references_.IsTracked(ref.id)) memory_store_.Put(ref.id, FromStatusReply(*reply));
    }
    std::optional<absl::Duration> ask_again;
    {
      absl::MutexLock lock(&state->mu);
      state->cancels.erase(query);
      if (first) --state->first_answers_pending;
      if (ready) {
        state->MarkReady(index);
      } else if (!state->finished && clock_->Now() < state->deadline) {
        ask_again = std::min(state->deadline - clock_->Now(), absl::Seconds(10));
      }
      state->changed.SignalAll();
    }
    if (ask_again) AskOwner(state, index, ref, *ask_again);
    absl::MutexLock lock(&queries_mu_);
    --queries_in_flight_;
  };
  std::function<void()> cancel =
      workers_->Get(ref.owner_address)
          ->GetObjectStatusAsync(ref.id.Binary(), wait, std::move(on_answer));
  absl::MutexLock lock(&state->mu);
  if (state->finished) {
    cancel();
  } else {
    state->cancels[query] = std::move(cancel);
  }
}

void ObjectService::StoreReturns(const rpc::PushTaskReply& reply, bool keep_live_copies) {
  // return_contained_return_index says which return each contained ref is inside (empty: all
  // inside returns[0]).
  const bool indexed =
      reply.return_contained_return_index_size() == reply.return_contained_refs_size() &&
      reply.return_contained_return_index_size() > 0;
  for (int index = 0; index < reply.returns_size(); ++index) {
    const rpc::ReturnObject& ret = reply.returns(index);
    auto id = ObjectId::FromBinary(ret.object_id());
    if (!id.ok()) continue;
    std::vector<ObjectRefInfo> contained;
    for (int i = 0; i < reply.return_contained_refs_size(); ++i) {
      if ((indexed ? reply.return_contained_return_index(i) : 0) != index) continue;
      const rpc::BorrowedRef& inner = reply.return_contained_refs(i);
      if (auto inner_id = ObjectId::FromBinary(inner.object_id()); inner_id.ok()) {
        contained.push_back({*inner_id, inner.owner_address()});
      }
    }
    if (!contained.empty()) {
      // Before the return is stored: held with it (or let go at once if nobody wants it).
      references_.SetContainedFromReturn(*id, std::move(contained));
    }
    std::optional<StoredObject> current;
    if (keep_live_copies || reply.returns_size() > 1) current = memory_store_.GetIfReady(*id);
    if (current && current->error == StoredObject::Error::kNone && current->value.in_plasma() &&
        ret.in_plasma() && !ret.is_application_error()) {
      // A run that rebuilt another of the task's returns made this one again while its first
      // copy lives on: keep the value, and list the new copy so that freeing it frees both.
      if (std::find(current->copy_raylet_addresses.begin(), current->copy_raylet_addresses.end(),
                    ret.raylet_address()) == current->copy_raylet_addresses.end()) {
        current->copy_raylet_addresses.push_back(ret.raylet_address());
        memory_store_.Put(*id, std::move(*current));
      }
      continue;
    }
    if (!references_.IsTracked(*id)) {
      // Nobody holds the result any more: drop its stored copy right away.
      if (ret.in_plasma()) raylets_->Get(ret.raylet_address())->FreeObjectsAsync({ret.object_id()});
      continue;
    }
    StoredObject object;
    object.value = ret;
    if (ret.is_application_error()) object.error = StoredObject::Error::kApplication;
    if (ret.in_plasma()) object.copy_raylet_addresses.push_back(ret.raylet_address());
    memory_store_.Put(*id, std::move(object));
  }
  // Objects the worker kept references to stay alive for it.
  for (const auto& borrowed : reply.borrowed_refs()) {
    auto id = ObjectId::FromBinary(borrowed.object_id());
    if (!id.ok()) continue;
    if (borrowed.owner_address() == address_) {
      references_.AddBorrower(*id, reply.worker_address());
    } else {
      workers_->Get(borrowed.owner_address())
          ->AddBorrowersAsync({borrowed.object_id()}, reply.worker_address());
    }
  }
}

void ObjectService::StoreError(const ObjectId& return_id, const std::string& function_name,
                               StoredObject::Error error, const std::string& message) {
  StoredObject object;
  object.error = error;
  object.error_message = message;
  object.value.set_function_name(function_name);
  memory_store_.Put(return_id, std::move(object));
}

void ObjectService::HandleGetObjectStatus(const rpc::GetObjectStatusRequest& request,
                                          rpc::GetObjectStatusReply* reply,
                                          std::function<void(absl::Status)> done) {
  auto id = ObjectId::FromBinary(request.object_id());
  if (!id.ok()) return done(id.status());
  if (!references_.IsTracked(*id) && !memory_store_.IsReady(*id)) {
    reply->set_status(rpc::GetObjectStatusReply::FREED);
    return done(absl::OkStatus());
  }
  if (request.lost_copy_raylet_addresses_size() > 0 && references_.IsOwnedHere(*id)) {
    // A borrower could not read it. Rebuild it if no copy we know of is left; the long poll
    // below then answers with the rebuilt value.
    std::optional<StoredObject> current = memory_store_.GetIfReady(*id);
    if (current && current->error == StoredObject::Error::kNone && current->value.in_plasma()) {
      const absl::flat_hash_set<std::string> lost(request.lost_copy_raylet_addresses().begin(),
                                                  request.lost_copy_raylet_addresses().end());
      std::vector<std::string> copies = current->copy_raylet_addresses;
      if (copies.empty()) copies.push_back(current->value.raylet_address());
      bool none_left = true;
      for (const auto& copy : copies) none_left &= lost.contains(copy);
      if (none_left) {
        OnCopiesLost(*id, *current,
                     absl::StrCat("is lost: a borrower could not read it from any copy (node ",
                                  BytesToHex(current->value.node_id()), ", raylet ",
                                  current->value.raylet_address(), ")"));
      }
    }
  }
  memory_store_.OnReady(
      *id, clock_->Now() + absl::Milliseconds(request.timeout_ms()),
      [reply, done = std::move(done)](std::optional<StoredObject> object) {
        if (!object) {
          reply->set_status(rpc::GetObjectStatusReply::PENDING);
        } else {
          reply->set_status(object->error == StoredObject::Error::kNone
                                ? rpc::GetObjectStatusReply::READY
                                : rpc::GetObjectStatusReply::FAILED);
          *reply->mutable_object() = object->value;
          if (object->error != StoredObject::Error::kNone &&
              object->error != StoredObject::Error::kApplication) {
            reply->mutable_object()->set_error_message(object->error_message);
            reply->set_error_kind(static_cast<rpc::GetObjectStatusReply::ErrorKind>(object->error));
          }
          for (const auto& copy : object->copy_raylet_addresses) {
            reply->add_copy_raylet_addresses(copy);
          }
        }
        done(absl::OkStatus());
      });
}

void ObjectService::OnNodeDead(const NodeId& node_id, const std::string& raylet_address) {
  absl::MutexLock lock(&dead_mu_);
  dead_nodes_.insert(node_id.Binary());
  if (!raylet_address.empty()) dead_raylets_.insert(raylet_address);
}

bool ObjectService::IsDeadRaylet(const std::string& raylet_address) const {
  absl::MutexLock lock(&dead_mu_);
  return dead_raylets_.contains(raylet_address);
}

absl::Status ObjectService::HandleAddObjectLocation(const rpc::AddObjectLocationRequest& request) {
  auto id = ObjectId::FromBinary(request.object_id());
  if (!id.ok()) return id.status();
  {
    absl::MutexLock lock(&dead_mu_);
    if (dead_nodes_.contains(request.node_id()) ||
        dead_raylets_.contains(request.raylet_address())) {
      // Fencing: a node declared dead does not come back as a holder of copies.
      return absl::FailedPreconditionError(
          absl::StrCat("node ", BytesToHex(request.node_id()).substr(0, 8), " (raylet ",
                       request.raylet_address(), ") was declared dead; its copy of object ",
                       id->Hex(), " is refused"));
    }
  }
  if (references_.IsTracked(*id)) {
    memory_store_.AddCopy(*id, request.raylet_address());
  } else {
    // Freed meanwhile: drop the new copy too.
    raylets_->Get(request.raylet_address())->FreeObjectsAsync({request.object_id()});
  }
  return absl::OkStatus();
}

void ObjectService::HandleAddBorrowers(const rpc::AddBorrowersRequest& request) {
  for (const auto& binary : request.object_ids()) {
    if (auto id = ObjectId::FromBinary(binary); id.ok()) {
      references_.AddBorrower(*id, request.borrower_address());
    }
  }
}

void ObjectService::HandleRemoveBorrowers(const rpc::RemoveBorrowersRequest& request) {
  for (const auto& binary : request.object_ids()) {
    if (auto id = ObjectId::FromBinary(binary); id.ok()) {
      references_.RemoveBorrower(*id, request.borrower_address());
    }
  }
}

}  // namespace troupe
