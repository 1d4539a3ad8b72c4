#include "src/object_store/object_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/resources.h"

namespace troupe {
namespace {

absl::Status ErrnoError(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status MakeDir(const std::string& path) {
  std::string partial;
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + partial);
  }
  return absl::OkStatus();
}

// Copies `from` to a new file `to` of `size` bytes (allocated up front, so a full tmpfs fails
// here instead of with SIGBUS later).
absl::Status CopyFile(const std::string& from, const std::string& to, int64_t size) {
  int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return ErrnoError("open " + from);
  int out = open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) {
    close(in);
    return ErrnoError("create " + to);
  }
  absl::Status status;
  if (size > 0) {
    if (int error = posix_fallocate(out, 0, size); error != 0) {
      status = error == ENOSPC || error == EDQUOT
                   ? absl::ResourceExhaustedError(absl::StrCat("no space for ", size, " bytes at ",
                                                               to, ": ", std::strerror(error)))
                   : absl::InternalError(absl::StrCat("allocating ", size, " bytes at ", to, ": ",
                                                      std::strerror(error)));
    }
  }
  std::vector<char> chunk(4 << 20);
  for (int64_t done = 0; status.ok() && done < size;) {
    ssize_t n = read(in, chunk.data(), chunk.size());
    if (n <= 0) {
      status = ErrnoError("read " + from);
      break;
    }
    for (ssize_t written = 0; written < n;) {
      ssize_t w = write(out, chunk.data() + written, n - written);
      if (w <= 0) {
        status = errno == ENOSPC || errno == EDQUOT
                     ? absl::ResourceExhaustedError(
                           absl::StrCat("no space to write ", to, ": ", std::strerror(errno)))
                     : ErrnoError("write " + to);
        break;
      }
      written += w;
    }
    done += n;
  }
  close(in);
  close(out);
  if (!status.ok()) unlink(to.c_str());
  return status;
}

// Free bytes on the filesystem holding `dir` (-1 if unknown).
int64_t FreeBytesAt(const std::string& dir) {
  struct statvfs fs;
  if (statvfs(dir.c_str(), &fs) != 0) return -1;
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

}  // namespace

ObjectStore::ObjectStore(ObjectStoreOptions options) : options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  stats_.capacity_bytes = options_.capacity_bytes;
  if (auto status = MakeDir(options_.shm_dir); !status.ok()) {
    TROUPE_LOG(Error) << "object store directory: " << status.message();
    return;
  }
  auto owner = StoreDirOwner::Acquire(options_.shm_dir);
  if (!owner.ok()) {
    TROUPE_LOG(Error) << owner.status().message();
    return;
  }
  owner_ = *std::move(owner);
  // The stores of raylets that died without removing theirs (SIGKILL) hold RAM: remove them.
  const size_t slash = options_.shm_dir.rfind('/');
  const std::string name = options_.shm_dir.substr(slash + 1);
  if (slash != std::string::npos && absl::StartsWith(name, kStoreDirPrefix)) {
    const int removed = RemoveStoreDirsOfDeadOwners(options_.shm_dir.substr(0, slash),
                                                    kStoreDirPrefix, name);
    if (removed > 0) {
      TROUPE_LOG(Info) << "removed " << removed << " object store director"
                       << (removed == 1 ? "y" : "ies") << " of raylets that died";
    }
  }
}

ObjectStore::~ObjectStore() = default;

std::string ObjectStore::ShmPath(const ObjectId& id) const {
  return absl::StrCat(options_.shm_dir, "/", id.Hex());
}

std::string ObjectStore::SpillPath(const ObjectId& id) const {
  return absl::StrCat(options_.spill_dir, "/", id.Hex());
}

absl::StatusOr<std::string> ObjectStore::Create(const ObjectId& id, int64_t size, bool primary,
                                                const ObjectOwner& owner) {
  absl::MutexLock lock(&mu_);
  if (auto it = entries_.find(id); it != entries_.end()) {
    Entry& entry = it->second;
    if (entry.sealed) {
      // Already here: an earlier attempt of the same task ran on this node (a retry, or a
      // rebuild after a loss elsewhere), or this is a copy. That value stays and counts as the
      // primary copy for the writer's owner; the writer need not write it again.
      entry.delete_when_released = false;
      if (primary) {
        entry.primary = true;
        entry.owner = owner;
      }
      return absl::AlreadyExistsError(absl::StrCat("object ", id.Hex(), " already exists"));
    }
    // Its writer died before sealing it: this attempt writes it afresh.
    RemoveLocked(id);
  }
  if ((!owner.worker_id.IsNil() && dead_owners_.contains(owner.worker_id)) ||
      (!owner.node_id.IsNil() && dead_owner_nodes_.contains(owner.node_id))) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", id.Hex(), " belongs to worker ", owner.worker_id.Hex(),
                     ", which has exited or died: nobody could read or free it"));
  }
  if (size > options_.capacity_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("object store full: an object of ", FormatBytes(size),
                     " is larger than the whole store (", FormatBytes(options_.capacity_bytes),
                     "); start the node with a larger "
                     "--object-store-memory"));
  }
  const std::string path = ShmPath(id);
  const bool reused = ReuseFileLocked(size, path);
  if (absl::Status room = MakeRoomLocked(size); !room.ok()) {
    if (reused) unlink(path.c_str());
    return room;
  }
  if (!reused) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoError("create " + path);
    if (size > 0 && posix_fallocate(fd, 0, size) != 0) {
      close(fd);
      unlink(path.c_str());
      return absl::ResourceExhaustedError(
          absl::StrCat("object store full: the shared-memory filesystem holding ", options_.shm_dir,
                       " has no room for ", FormatBytes(size), " (check `df -h /dev/shm`)"));
    }
    close(fd);
  }
  Entry& entry = entries_[id];
  entry.size = size;
  entry.primary = primary;
  entry.owner = owner;
  entry.lru = lru_.end();
  stats_.used_bytes += size;
  stats_.num_objects++;
  return path;
}

absl::Status ObjectStore::Seal(const ObjectId& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("no object ", id.Hex()));
  if (it->second.sealed) return absl::OkStatus();
  it->second.sealed = true;
  it->second.lru = lru_.insert(lru_.end(), id);
  return absl::OkStatus();
}

void ObjectStore::Abort(const ObjectId& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it != entries_.end() && !it->second.sealed) RemoveLocked(id);
}

absl::StatusOr<ObjectStore::Location> ObjectStore::Get(const ObjectId& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.sealed || it->second.delete_when_released) {
    return absl::NotFoundError(absl::StrCat("object ", id.Hex(), " is not on this node"));
  }
  Entry& entry = it->second;
  if (entry.spilled) {
    entry.pins++;  // keep MakeRoom from touching it while we restore it
    absl::Status restored = MakeRoomLocked(entry.size);
    entry.pins--;
    if (restored.ok()) restored = RestoreLocked(id, entry);
    if (!restored.ok()) {
      // No room to bring it back (or the copy failed): its bytes are on disk, so it is read
      // there. The pin keeps the spill file until the reader lets go.
      TROUPE_LOG(Info) << "object " << id.Hex()
                       << " is read from its spill file: " << restored.message();
      entry.pins++;
      return Location{SpillPath(id), entry.size, entry.owner};
    }
  } else {
    lru_.splice(lru_.end(), lru_, entry.lru);
  }
  entry.pins++;
  return Location{ShmPath(id), entry.size, entry.owner};
}

void ObjectStore::Release(const ObjectId& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.pins == 0) return;
  if (--it->second.pins == 0 && it->second.delete_when_released) RemoveLocked(id);
}

bool ObjectStore::Contains(const ObjectId& id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.sealed && !it->second.delete_when_released;
}

void ObjectStore::Delete(const ObjectId& id) {
  absl::MutexLock lock(&mu_);
  DeleteLocked(id);
}

void ObjectStore::DeleteLocked(const ObjectId& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  if (it->second.pins > 0) {
    it->second.delete_when_released = true;
  } else {
    RemoveLocked(id);
  }
}

void ObjectStore::RememberDeadOwnerLocked(const WorkerId& worker_id) {
  if (!dead_owners_.insert(worker_id).second) return;
  dead_owner_order_.push_back(worker_id);
  if (dead_owner_order_.size() > kMaxDeadOwners) {
    dead_owners_.erase(dead_owner_order_.front());
    dead_owner_order_.pop_front();
  }
}

int64_t ObjectStore::FreeOwnedBy(const WorkerId& worker_id) {
  if (worker_id.IsNil()) return 0;
  absl::MutexLock lock(&mu_);
  RememberDeadOwnerLocked(worker_id);
  std::vector<ObjectId> owned;
  for (const auto& [id, entry] : entries_) {
    if (entry.owner.worker_id == worker_id && !entry.delete_when_released) owned.push_back(id);
  }
  for (const auto& id : owned) DeleteLocked(id);
  return static_cast<int64_t>(owned.size());
}

int64_t ObjectStore::FreeOwnedByNode(const NodeId& node_id) {
  if (node_id.IsNil()) return 0;
  absl::MutexLock lock(&mu_);
  dead_owner_nodes_.insert(node_id);
  std::vector<ObjectId> owned;
  for (const auto& [id, entry] : entries_) {
    if (entry.owner.node_id == node_id && !entry.delete_when_released) owned.push_back(id);
  }
  for (const auto& id : owned) DeleteLocked(id);
  return static_cast<int64_t>(owned.size());
}

bool ObjectStore::ReuseFileLocked(int64_t size, const std::string& path) {
  int best = -1;
  for (size_t i = 0; i < kept_files_.size(); ++i) {
    const int64_t kept = kept_files_[i].size;
    if (kept >= size && kept <= 2 * size && (best < 0 || kept < kept_files_[best].size)) {
      best = static_cast<int>(i);
    }
  }
  if (best < 0) return false;
  KeptFile file = kept_files_[best];
  kept_files_.erase(kept_files_.begin() + best);
  kept_bytes_ -= file.size;
  if (rename(file.path.c_str(), path.c_str()) != 0) {
    unlink(file.path.c_str());
    return false;
  }
  if (file.size != size && truncate(path.c_str(), size) != 0) {
    unlink(path.c_str());
    return false;
  }
  return true;
}

void ObjectStore::DropKeptFilesLocked(int64_t needed) {
  while (!kept_files_.empty() &&
         stats_.used_bytes + kept_bytes_ + needed > options_.capacity_bytes) {
    unlink(kept_files_.back().path.c_str());
    kept_bytes_ -= kept_files_.back().size;
    kept_files_.pop_back();
  }
}

void ObjectStore::RemoveLocked(const ObjectId& id) {
  auto it = entries_.find(id);
  Entry& entry = it->second;
  if (entry.spilled) {
    unlink(SpillPath(id).c_str());
    stats_.spilled_bytes -= entry.size;
  } else {
    const std::string path = ShmPath(id);
    const std::string kept = absl::StrCat(options_.shm_dir, "/kept-", next_kept_file_++);
    // Big sealed files are kept for the next object of their size (see the header).
    if (entry.sealed && entry.size >= (1 << 20) &&
        kept_bytes_ + entry.size <= options_.capacity_bytes / 2 &&
        rename(path.c_str(), kept.c_str()) == 0) {
      kept_files_.push_back({kept, entry.size});
      kept_bytes_ += entry.size;
    } else {
      unlink(path.c_str());
    }
    stats_.used_bytes -= entry.size;
    if (entry.lru != lru_.end()) lru_.erase(entry.lru);
  }
  stats_.num_objects--;
  entries_.erase(it);
}

absl::Status ObjectStore::MakeRoomLocked(int64_t needed) {
  // Kept files first: they hold no object (a reusable one was already taken by ReuseFileLocked).
  DropKeptFilesLocked(needed);
  // Called only here, with mu_ held (the analysis does not carry the lock into lambdas).
  auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stats_.used_bytes + kept_bytes_ + needed <= options_.capacity_bytes;
  };
  // First: secondary copies nobody is reading (the primary lives on another node).
  for (auto it = lru_.begin(); !fits() && it != lru_.end();) {
    const ObjectId id = *it++;
    Entry& entry = entries_[id];
    if (!entry.primary && entry.pins == 0) {
      RemoveLocked(id);
      stats_.num_evicted_total++;
    }
  }
  // Then: spill primary copies nobody is reading.
  for (auto it = lru_.begin(); !fits() && it != lru_.end();) {
    const ObjectId id = *it++;
    Entry& entry = entries_[id];
    if (entry.primary && entry.pins == 0) {
      if (auto status = SpillLocked(id, entry); !status.ok()) {
        const absl::Time now = absl::Now();
        if (now - last_spill_error_logged_ >= absl::Minutes(1)) {
          TROUPE_LOG(Error) << "spilling object " << id.Hex() << " failed: " << status.message()
                            << (spill_errors_not_logged_ > 0
                                    ? absl::StrCat(" (", spill_errors_not_logged_,
                                                   " more spill failures since the last such line)")
                                    : std::string());
          last_spill_error_logged_ = now;
          spill_errors_not_logged_ = 0;
        } else {
          ++spill_errors_not_logged_;
        }
        return absl::ResourceExhaustedError(absl::StrCat(
            "object store full: ", FormatBytes(needed), " needed, ", FormatBytes(stats_.used_bytes),
            " of ", FormatBytes(options_.capacity_bytes),
            " in use, and spilling to disk failed: ", status.message()));
      }
    }
  }
  if (fits()) return absl::OkStatus();
  int64_t pinned = 0;
  for (const auto& [other, entry] : entries_) {
    if (!entry.spilled && (entry.pins > 0 || !entry.sealed)) pinned += entry.size;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "object store full: ", FormatBytes(needed), " needed, ", FormatBytes(stats_.used_bytes),
      " of ", FormatBytes(options_.capacity_bytes), " in use and ", FormatBytes(pinned),
      " of it pinned by readers or being written, so nothing more can be evicted or spilled. "
      "Drop ObjectRefs you no longer need, or raise --object-store-memory"));
}

absl::Status ObjectStore::SpillLocked(const ObjectId& id, Entry& entry) {
  if (auto status = MakeDir(options_.spill_dir); !status.ok()) return status;
  absl::Status copied =
      options_.testing_spill_disk_bytes > 0 &&
              stats_.spilled_bytes + entry.size > options_.testing_spill_disk_bytes
          ? absl::ResourceExhaustedError("no space (testing_spill_disk_bytes)")
          : CopyFile(ShmPath(id), SpillPath(id), entry.size);
  if (copied.code() == absl::StatusCode::kResourceExhausted) {
    const int64_t free = options_.testing_spill_disk_bytes > 0
                             ? options_.testing_spill_disk_bytes - stats_.spilled_bytes
                             : FreeBytesAt(options_.spill_dir);
    return absl::ResourceExhaustedError(absl::StrCat(
        "the spill disk is full: the spill directory ", options_.spill_dir, " has ",
        free < 0 ? std::string("unknown") : FormatBytes(free), " free and spilling needs ",
        FormatBytes(entry.size), " more (", FormatBytes(stats_.spilled_bytes),
        " already spilled there). Free space on that disk, drop ObjectRefs you no longer need, "
        "or start the node with --spill-dir on a larger disk"));
  }
  if (!copied.ok()) return copied;
  unlink(ShmPath(id).c_str());
  lru_.erase(entry.lru);
  entry.lru = lru_.end();
  entry.spilled = true;
  stats_.used_bytes -= entry.size;
  stats_.spilled_bytes += entry.size;
  stats_.num_spilled_total++;
  return absl::OkStatus();
}

absl::Status ObjectStore::RestoreLocked(const ObjectId& id, Entry& entry) {
  if (auto status = CopyFile(SpillPath(id), ShmPath(id), entry.size); !status.ok()) return status;
  unlink(SpillPath(id).c_str());
  entry.spilled = false;
  entry.lru = lru_.insert(lru_.end(), id);
  stats_.used_bytes += entry.size;
  stats_.spilled_bytes -= entry.size;
  stats_.num_restored_total++;
  return absl::OkStatus();
}

ObjectStoreStats ObjectStore::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

std::vector<StoredObjectInfo> ObjectStore::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<StoredObjectInfo> out;
  out.reserve(entries_.size());
  for (const auto& [id, entry] : entries_) {
    out.push_back(
        {id, entry.size, entry.owner, entry.primary, entry.spilled, entry.sealed, entry.pins});
  }
  return out;
}

void ObjectStore::Destroy() {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, entry] : entries_) {
    unlink((entry.spilled ? SpillPath(id) : ShmPath(id)).c_str());
  }
  for (const auto& file : kept_files_) unlink(file.path.c_str());
  kept_files_.clear();
  kept_bytes_ = 0;
  entries_.clear();
  lru_.clear();
  unlink(absl::StrCat(options_.shm_dir, "/", kStoreOwnerLockFile).c_str());
  owner_ = StoreDirOwner();
  rmdir(options_.shm_dir.c_str());
  rmdir(options_.spill_dir.c_str());
}

}  // namespace troupe
