#include "src/raylet/object_manager.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace troupe {

ObjectManager::ObjectManager(ObjectStore* store, ObjectPuller* puller,
                             ObjectManagerOptions options)
    : store_(store),
      puller_(puller),
      options_(std::move(options)),
      slots_(std::max(options_.max_streams, 1)) {}

absl::Status ObjectManager::Fetch(const ObjectId& id, const std::vector<std::string>& sources) {
  if (sources.empty()) return absl::InvalidArgumentError("no source to fetch the object from");
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
  absl::Status status =
      ObjectTransfer(store_, puller_, &slots_, options_.transfer, id, sources).Run();
  absl::MutexLock lock(&mu_);
  in_flight_.erase(id);
  if (!status.ok()) finished_[id] = status;
  done_.SignalAll();
  return status;
}

absl::Status ObjectManager::ServeObject(const ObjectId& id, int64_t offset, int64_t length,
                                        int64_t chunk_size, ChunkWriter* writer) {
  auto location = store_->Get(id);  // pinned: its file is neither reused nor spilled meanwhile
  if (!location.ok()) return location.status();
  return ServePinned(*location, id, offset, length, chunk_size, writer);
}

absl::Status ObjectManager::ServePinned(const ObjectStore::Location& location, const ObjectId& id,
                                        int64_t offset, int64_t length, int64_t chunk_size,
                                        ChunkWriter* writer) {
  if (offset < 0 || offset > location.size) {
    store_->Release(id);
    return absl::OutOfRangeError(absl::StrCat("offset ", offset, " lies outside the object's ",
                                              location.size, " bytes"));
  }
  if (chunk_size <= 0) chunk_size = kObjectChunkBytes;
  const int64_t end = length <= 0 ? location.size : std::min(location.size, offset + length);
  rpc::ObjectChunk header;
  header.set_object_id(id.Binary());
  header.set_total_size(location.size);
  if (!location.owner.worker_id.IsNil()) {
    header.set_owner_worker_id(location.owner.worker_id.Binary());
  }
  if (!location.owner.node_id.IsNil()) header.set_owner_node_id(location.owner.node_id.Binary());
  if (!writer->WriteHeader(header) || end == offset) {
    store_->Release(id);
    return absl::OkStatus();
  }
  // Only the asked range is mapped (from its page), populated at once: the socket copies from
  // it without a page fault per page.
  static const int64_t kPage = sysconf(_SC_PAGESIZE);
  const int64_t map_begin = offset / kPage * kPage;
  const int64_t map_size = end - map_begin;
  int fd = open(location.path.c_str(), O_RDONLY | O_CLOEXEC);
  void* mapped = fd < 0 ? MAP_FAILED
                        : mmap(nullptr, map_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd,
                               map_begin);
  const int error = errno;
  if (fd >= 0) close(fd);
  if (mapped == MAP_FAILED) {
    store_->Release(id);
    return absl::InternalError(
        absl::StrCat("cannot map ", location.path, ": ", std::strerror(error)));
  }
  // The writer may still be sending from the mapping after we return: the last holder unmaps it
  // and unpins the object.
  std::shared_ptr<const void> mapping(mapped, [store = store_, id, map_size](const void* p) {
    munmap(const_cast<void*>(p), map_size);
    store->Release(id);
  });
  const char* data = static_cast<const char*>(mapped) - map_begin;  // indexed by object offset
  for (int64_t at = offset; at < end;) {
    if (options_.testing_serve_chunk_delay > absl::ZeroDuration()) {
      absl::SleepFor(options_.testing_serve_chunk_delay);
    }
    const int64_t n = std::min(chunk_size, end - at);
    if (!writer->WriteData(at, data + at, n, mapping)) break;  // the puller went away
    at += n;
  }
  return absl::OkStatus();
}

void ObjectManager::Free(const ObjectId& id) { store_->Delete(id); }

}  // namespace troupe
