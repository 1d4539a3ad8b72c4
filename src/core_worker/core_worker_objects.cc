#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/core_worker/core_worker.h"
#include "src/rpc/server.h"

// Reading and writing objects: Put, Get, Wait, the memory store and the node's shared-memory
// store (mapping files, fetching copies from other nodes), and freeing what nobody references.
namespace troupe {
namespace {

StoredObject FromStatusReply(const rpc::GetObjectStatusReply& reply) {
  StoredObject object;
  object.value = reply.object();
  object.copy_raylet_addresses.assign(reply.copy_raylet_addresses().begin(),
                                      reply.copy_raylet_addresses().end());
  if (reply.status() == rpc::GetObjectStatusReply::FAILED) {
    object.error = reply.object().is_application_error() ? StoredObject::Error::kApplication
                                                         : StoredObject::Error::kTaskFailed;
    object.error_message = reply.object().error_message();
  }
  return object;
}

}  // namespace

// ---- Objects ----

void CoreWorker::OnOwnedFree(const ObjectId& id, std::vector<ObjectRefInfo> contained) {
  std::optional<StoredObject> object = memory_store_.GetIfReady(id);
  memory_store_.Erase(id);
  if (object && object->value.in_plasma()) {
    for (const auto& copy : object->copy_raylet_addresses) {
      raylets_.Get(copy)->FreeObjectsAsync({id.Binary()});
    }
  }
  for (const auto& inner : contained) references_.RemoveLocal(inner.id);
}

void CoreWorker::OnBorrowedRelease(const ObjectId& id, const std::string& owner, bool owner_knows) {
  memory_store_.Erase(id);
  if (owner_knows) workers_.Get(owner)->RemoveBorrowersAsync({id.Binary()}, address_);
}

absl::StatusOr<ObjectRefInfo> CoreWorker::Put(size_t size, const std::function<void(char*)>& write,
                                              std::vector<ObjectRefInfo> contained) {
  const ObjectId id = ObjectId::FromIndex(put_task_id_, ++put_index_);
  StoredObject object;
  if (static_cast<int64_t>(size) <= options_.max_inline_bytes) {
    std::string bytes(size, '\0');
    write(bytes.data());
    object.value.set_inline_value(std::move(bytes));
  } else {
    auto stored = StoreTaskReturn(id, size, write);
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

absl::StatusOr<rpc::ReturnObject> CoreWorker::StoreTaskReturn(
    const ObjectId& id, size_t size, const std::function<void(char*)>& write) {
  auto path = raylet_->CreateObject(id.Binary(), static_cast<int64_t>(size), /*primary=*/true);
  if (!path.ok()) return path.status();
  auto target = MapForWrite(*path, size);
  if (!target.ok()) return target.status();
  write(target->address);
  if (!target->cached && size > 0) munmap(target->address, size);
  if (auto status = raylet_->SealObject(id.Binary()); !status.ok()) return status;
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

absl::StatusOr<CoreWorker::WriteTarget> CoreWorker::MapForWrite(const std::string& path,
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

void CoreWorker::SetBlocked(bool blocked) {
  if (options_.is_driver || !executing_) return;
  // Best effort: if the raylet cannot be told, it only lends this worker's CPU a little later.
  if (blocked) {
    if (blocked_depth_++ == 0) (void)raylet_->NotifyBlocked(options_.worker_id.Binary(), true);
  } else {
    if (--blocked_depth_ == 0) (void)raylet_->NotifyBlocked(options_.worker_id.Binary(), false);
  }
}

absl::StatusOr<std::optional<StoredObject>> CoreWorker::Resolve(const ObjectRefInfo& ref,
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
        std::max(absl::ZeroDuration(), std::min(deadline - absl::Now(), absl::Seconds(10)));
    auto reply = workers_.Get(ref.owner_address)->GetObjectStatus(ref.id.Binary(), wait);
    if (!reply.ok()) {
      StoredObject lost;
      lost.error = StoredObject::Error::kLost;
      lost.error_message = absl::StrCat("the owner of object ", ref.id.Hex(), " (at ",
                                        ref.owner_address, ") is gone: ", reply.status().message());
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
    if (absl::Now() >= deadline) break;
  }
  return result;
}

absl::StatusOr<ObjectBuffer> CoreWorker::MapLocalObject(const ObjectId& id) {
  auto objects = raylet_->GetObjects({id.Binary()});
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
    raylet->ReleaseObjectsAsync({binary});
    buffer.holder = std::make_shared<char>(0);
    buffer.data = static_cast<const char*>(buffer.holder.get());
    return buffer;
  }
  int fd = open(local.path().c_str(), O_RDONLY | O_CLOEXEC);
  void* mapped = fd < 0 ? MAP_FAILED : mmap(nullptr, buffer.size, PROT_READ, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  if (mapped == MAP_FAILED) {
    raylet->ReleaseObjectsAsync({binary});
    return absl::InternalError(
        absl::StrCat("cannot map ", local.path(), ": ", std::strerror(errno)));
  }
  const size_t size = buffer.size;
  buffer.data = static_cast<const char*>(mapped);
  // Unmapped and unpinned when the last reader lets go. The unpin is synchronous so the store
  // can reuse the memory at once (a put right after a read must not find it still pinned).
  buffer.holder = std::shared_ptr<const void>(mapped, [raylet, binary, size](const void* p) {
    munmap(const_cast<void*>(p), size);
    (void)raylet->ReleaseObjects({binary});
  });
  return buffer;
}

GetResult CoreWorker::Materialize(const ObjectRefInfo& ref, const StoredObject& object) {
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
    absl::Status fetched = absl::NotFoundError("no copy to fetch from");
    for (const auto& source : sources) {
      if (source == options_.raylet_address) continue;
      fetched = raylet_->FetchObject(ref.id.Binary(), source, absl::Minutes(10));
      if (fetched.ok()) break;
    }
    if (fetched.ok()) {
      if (references_.OwnedByMe(ref)) {
        memory_store_.AddCopy(ref.id, options_.raylet_address);
      } else {
        workers_.Get(ref.owner_address)
            ->AddObjectLocationAsync(ref.id.Binary(), options_.raylet_address, node_id_.Binary());
      }
      mapped = MapLocalObject(ref.id);
    } else {
      mapped = absl::NotFoundError(fetched.message());
    }
  }
  if (!mapped.ok()) {
    result.error = StoredObject::Error::kLost;
    result.error_message = absl::StrCat("object ", ref.id.Hex(), " is lost: every copy is gone (",
                                        mapped.status().message(), ")");
    return result;
  }
  result.buffer = std::move(*mapped);
  return result;
}

absl::StatusOr<std::vector<GetResult>> CoreWorker::Get(const std::vector<ObjectRefInfo>& refs,
                                                       absl::Time deadline) {
  std::vector<GetResult> results;
  results.reserve(refs.size());
  // A worker waiting here gives its CPUs back meanwhile, so the tasks it waits for can run.
  bool blocked = false;
  struct Unblock {
    CoreWorker* worker;
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
    auto object = Resolve(ref, deadline);
    if (!object.ok()) return object.status();
    if (!object->has_value()) {
      return absl::DeadlineExceededError(
          absl::StrCat("object ", ref.id.Hex(), " was not ready before the timeout"));
    }
    results.push_back(Materialize(ref, **object));
  }
  return results;
}

std::vector<bool> CoreWorker::Wait(const std::vector<ObjectRefInfo>& refs, int num_ready,
                                   absl::Time deadline) {
  std::vector<ObjectId> ids;
  bool all_owned = true;
  for (const auto& ref : refs) {
    ids.push_back(ref.id);
    all_owned &= references_.OwnedByMe(ref);
  }
  if (all_owned) return memory_store_.WaitMany(ids, static_cast<size_t>(num_ready), deadline);
  // Some are borrowed: ask around until enough are ready.
  std::vector<bool> ready(refs.size(), false);
  while (true) {
    int count = 0;
    for (size_t i = 0; i < refs.size(); ++i) {
      if (!ready[i]) {
        auto object = Resolve(refs[i], absl::Now());
        ready[i] = object.ok() && object->has_value();
      }
      count += ready[i];
    }
    if (count >= std::min<int>(num_ready, static_cast<int>(refs.size())) ||
        absl::Now() >= deadline) {
      return ready;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace troupe
