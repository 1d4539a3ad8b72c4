#include "src/raylet/object_manager.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace troupe {

ObjectManager::ObjectManager(ObjectStore* store, ObjectPuller* puller)
    : store_(store), puller_(puller) {}

absl::Status ObjectManager::Fetch(const ObjectId& id, const std::string& from_raylet_address) {
  {
    absl::MutexLock lock(&mu_);
    if (store_->Contains(id)) return absl::OkStatus();
    if (in_flight_.contains(id)) {
      while (in_flight_.contains(id)) done_.Wait(&mu_);
      auto it = finished_.find(id);
      return it == finished_.end() ? absl::OkStatus() : it->second;
    }
    in_flight_[id] = true;
    finished_.erase(id);
  }
  absl::Status status = Transfer(id, from_raylet_address);
  absl::MutexLock lock(&mu_);
  in_flight_.erase(id);
  if (!status.ok()) finished_[id] = status;
  done_.SignalAll();
  return status;
}

absl::Status ObjectManager::Transfer(const ObjectId& id, const std::string& from) {
  int fd = -1;
  char* mapped = nullptr;
  int64_t size = 0, received = 0;
  // The first chunk says the object's size: the copy is created and mapped then.
  absl::Status status = puller_->Pull(
      from, id, kObjectChunkBytes, [&](const rpc::ObjectChunk& chunk) -> absl::Status {
        if (fd < 0) {
          if (chunk.total_size() < 0) {
            return absl::DataLossError(
                absl::StrCat("an object chunk says the object has ", chunk.total_size(), " bytes"));
          }
          size = chunk.total_size();
          // The copy is the owner's like the primary: it goes when the owner does.
          ObjectOwner owner;
          if (auto worker = WorkerId::FromBinary(chunk.owner_worker_id()); worker.ok()) {
            owner.worker_id = *worker;
          }
          if (auto node = NodeId::FromBinary(chunk.owner_node_id()); node.ok()) {
            owner.node_id = *node;
          }
          auto path = store_->Create(id, size, /*primary=*/false, owner);
          if (!path.ok()) return path.status();
          fd = open(path->c_str(), O_RDWR | O_CLOEXEC);
          if (fd < 0 ||
              (size > 0 && (mapped = static_cast<char*>(mmap(nullptr, size, PROT_WRITE, MAP_SHARED,
                                                             fd, 0))) == MAP_FAILED)) {
            mapped = nullptr;
            return absl::InternalError(
                absl::StrCat("cannot map ", *path, ": ", std::strerror(errno)));
          }
        }
        // A peer's chunk lands in our mapping only if it lies wholly inside the object.
        if (chunk.offset() < 0 || chunk.offset() > size ||
            static_cast<int64_t>(chunk.data().size()) > size - chunk.offset()) {
          return absl::DataLossError(
              absl::StrCat("an object chunk (offset ", chunk.offset(), ", ", chunk.data().size(),
                           " bytes) lies outside the object's ", size, " bytes"));
        }
        std::memcpy(mapped + chunk.offset(), chunk.data().data(), chunk.data().size());
        received += chunk.data().size();
        return absl::OkStatus();
      });
  if (status.ok() && fd < 0) status = absl::NotFoundError("the remote node sent nothing");
  if (status.ok() && received != size) {
    status = absl::DataLossError(absl::StrCat("received ", received, " of ", size, " bytes"));
  }
  if (mapped != nullptr) munmap(mapped, size);
  if (fd >= 0) close(fd);
  if (status.ok()) return store_->Seal(id);
  if (fd >= 0) store_->Abort(id);
  return status;
}

absl::Status ObjectManager::ServeObject(const ObjectId& id, int64_t chunk_size,
                                        const std::function<bool(const rpc::ObjectChunk&)>& write) {
  auto location = store_->Get(id);
  if (!location.ok()) return location.status();
  if (chunk_size <= 0) chunk_size = kObjectChunkBytes;
  int fd = open(location->path.c_str(), O_RDONLY | O_CLOEXEC);
  absl::Status status;
  if (fd < 0) {
    status = absl::InternalError("cannot open the object's file");
  } else {
    rpc::ObjectChunk chunk;
    chunk.set_object_id(id.Binary());
    chunk.set_total_size(location->size);
    if (!location->owner.worker_id.IsNil()) {
      chunk.set_owner_worker_id(location->owner.worker_id.Binary());
    }
    if (!location->owner.node_id.IsNil()) chunk.set_owner_node_id(location->owner.node_id.Binary());
    std::string buffer;
    int64_t offset = 0;
    do {
      const int64_t n = std::min(chunk_size, location->size - offset);
      buffer.resize(n);
      if (n > 0 && pread(fd, buffer.data(), n, offset) != n) {
        status = absl::InternalError("short read of the object's file");
        break;
      }
      chunk.set_offset(offset);
      chunk.set_data(buffer);
      if (!write(chunk)) break;  // the puller went away
      offset += n;
    } while (offset < location->size);
    close(fd);
  }
  store_->Release(id);
  return status;
}

void ObjectManager::Free(const ObjectId& id) { store_->Delete(id); }

}  // namespace troupe
