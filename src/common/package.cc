#include "src/common/package.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/common/remove_tree.h"
#include "src/common/status_macros.h"

namespace troupe {
namespace {

template <typename T>
void Append(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// What a package may set: the owner's execute bit decides between rwxr-xr-x and rw-r--r--.
// Never setuid/setgid/sticky, never group- or world-writable.
uint32_t NormalizedMode(uint32_t mode) { return (mode & S_IXUSR) ? 0755 : 0644; }

// What packing has seen so far, to stop early on a tree past the limits.
struct PackProgress {
  const PackageLimits& limits;
  int64_t files = 0;
};

absl::Status PackInto(const std::string& root, const std::string& relative, int depth,
                      int64_t max_bytes, PackProgress* progress, std::string* out) {
  const std::string dir = relative.empty() ? root : root + "/" + relative;
  if (depth >= progress->limits.max_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("the working directory ", root, " has paths deeper than ",
                     progress->limits.max_depth, " levels (at '", relative.substr(0, 200),
                     "'); a package may be at most ", progress->limits.max_depth, " levels deep"));
  }
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read directory ", dir, ": ", std::strerror(errno)));
  }
  std::vector<std::string> names;
  while (dirent* entry = readdir(handle)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(handle);
  for (const auto& name : names) {
    const std::string rel = relative.empty() ? name : relative + "/" + name;
    const std::string path = root + "/" + rel;
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (auto status = PackInto(root, rel, depth + 1, max_bytes, progress, out); !status.ok()) {
        return status;
      }
    } else if (S_ISREG(st.st_mode)) {
      if (++progress->files > progress->limits.max_entries) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the working directory ", root, " holds more than ", progress->limits.max_entries,
            " files; a package may hold at most ", progress->limits.max_entries,
            " files and directories: leave generated files and data out of it"));
      }
      if (static_cast<int64_t>(out->size()) + st.st_size > max_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the working directory ", root, " is larger than ", max_bytes >> 20,
            " MiB; leave big data out of it (read it from shared storage, or Put it)"));
      }
      std::ifstream in(path, std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      const std::string content = bytes.str();
      Append<uint32_t>(out, static_cast<uint32_t>(rel.size()));
      out->append(rel);
      Append<uint32_t>(out, NormalizedMode(st.st_mode));
      Append<uint64_t>(out, content.size());
      out->append(content);
    }
  }
  return absl::OkStatus();
}

struct Entry {
  std::string path;  // checked: relative, no "", "." or ".." component
  uint32_t mode;
  size_t offset;  // of the content in the package
  uint64_t size;
};

// A path from a package is safe if it is relative and every '/'-separated component is a real
// name: nothing can climb out of (or alias) the directory it is unpacked into.
bool SafeRelativePath(const std::string& path) {
  if (path.empty() || path[0] == '/' || path.find('\0') != std::string::npos) return false;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

// A path for an error message: at most 100 characters of it.
std::string Shown(absl::string_view path) {
  return path.size() <= 100 ? std::string(path) : absl::StrCat(path.substr(0, 100), "...");
}

// Reads every entry's header and checks it against `limits`, writing nothing.
absl::StatusOr<std::vector<Entry>> ParsePackage(const std::string& package,
                                                const PackageLimits& limits) {
  std::vector<Entry> entries;
  int64_t files = 0, bytes = 0;
  // The directories the paths make, as views into `package`; counted up to the limit only.
  absl::flat_hash_set<absl::string_view> dirs;
  size_t pos = 0;
  auto read = [&](void* out, size_t n) {
    if (n > package.size() - pos) return false;
    std::memcpy(out, package.data() + pos, n);
    pos += n;
    return true;
  };
  while (pos < package.size()) {
    uint32_t path_size, mode;
    uint64_t size;
    if (!read(&path_size, 4) || path_size > package.size() - pos) {
      return absl::DataLossError(
          absl::StrCat("truncated package: entry ", files + 1, " has no whole path"));
    }
    const absl::string_view rel(package.data() + pos, path_size);
    pos += path_size;
    if (!read(&mode, 4) || !read(&size, 8) || size > package.size() - pos) {
      return absl::DataLossError(
          absl::StrCat("truncated package: the content of '", Shown(rel), "' is cut off"));
    }
    const int64_t depth = std::count(rel.begin(), rel.end(), '/') + 1;
    if (depth > limits.max_depth) {
      return absl::InvalidArgumentError(absl::StrCat("package path '", Shown(rel), "' is ", depth,
                                                     " levels deep; a package may be at most ",
                                                     limits.max_depth, " levels deep"));
    }
    if (static_cast<int64_t>(rel.size()) > limits.max_path_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "package path '", Shown(rel), "' is ", rel.size(),
          " bytes long; a package's paths may be at most ", limits.max_path_bytes, " bytes"));
    }
    if (!SafeRelativePath(std::string(rel))) {
      return absl::DataLossError(absl::StrCat(
          "package path '", Shown(rel),
          "' leaves the directory (absolute, empty, or with a '.' or '..' component)"));
    }
    ++files;
    bytes += static_cast<int64_t>(size);
    if (files + static_cast<int64_t>(dirs.size()) <= limits.max_entries) {
      for (size_t slash = rel.find('/'); slash != absl::string_view::npos;
           slash = rel.find('/', slash + 1)) {
        dirs.insert(rel.substr(0, slash));
      }
      entries.push_back({std::string(rel), mode, pos, size});
    }
    pos += size;
  }
  const int64_t made = files + static_cast<int64_t>(dirs.size());
  if (made > limits.max_entries) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the package holds ", files, " files",
        files > limits.max_entries ? ""
                                   : absl::StrCat(" in at least ", dirs.size(), " directories"),
        "; a package may make at most ", limits.max_entries,
        " files and directories together: leave generated files and data out of it"));
  }
  if (bytes > limits.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("the package's files add up to ", bytes,
                                                     " bytes; at most ", limits.max_bytes,
                                                     " bytes may be unpacked"));
  }
  return entries;
}

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Creates `path` and its missing parents (like mkdir -p).
absl::Status MakeDirs(const std::string& path) {
  for (size_t pos = path.find('/', 1);; pos = path.find('/', pos + 1)) {
    const std::string prefix = path.substr(0, pos);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return Errno("mkdir", prefix);
    }
    if (pos == std::string::npos) return absl::OkStatus();
  }
}

// Writes one entry below the directory `root_fd`, creating its parent directories. Every step is
// relative to a directory fd and refuses to follow symlinks or reuse an existing file.
absl::Status WriteEntry(int root_fd, const std::string& package, const Entry& entry,
                        const std::string& shown_root) {
  std::vector<std::string> parts = absl::StrSplit(entry.path, '/');
  int dir_fd = dup(root_fd);
  if (dir_fd < 0) return Errno("dup", shown_root);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (mkdirat(dir_fd, parts[i].c_str(), 0755) != 0 && errno != EEXIST) {
      const absl::Status status = Errno("mkdir", shown_root + "/" + entry.path);
      close(dir_fd);
      return status;
    }
    const int next =
        openat(dir_fd, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(dir_fd);
    if (next < 0) {
      return absl::DataLossError(
          absl::StrCat("package entry '", entry.path, "': '", parts[i], "' is not a directory"));
    }
    dir_fd = next;
  }
  const int fd = openat(dir_fd, parts.back().c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  close(dir_fd);
  if (fd < 0) {
    if (errno == EEXIST) {
      return absl::DataLossError(
          absl::StrCat("package entry '", entry.path, "' appears twice (or is also a directory)"));
    }
    return Errno("create", shown_root + "/" + entry.path);
  }
  const char* data = package.data() + entry.offset;
  for (uint64_t written = 0; written < entry.size;) {
    const ssize_t n = write(fd, data + written, entry.size - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const absl::Status status = Errno("write", shown_root + "/" + entry.path);
      close(fd);
      return status;
    }
    written += static_cast<uint64_t>(n);
  }
  const bool ok = fchmod(fd, NormalizedMode(entry.mode)) == 0;
  const absl::Status status = ok ? absl::OkStatus() : Errno("chmod", shown_root + "/" + entry.path);
  if (close(fd) != 0 && status.ok()) return Errno("close", shown_root + "/" + entry.path);
  return status;
}

}  // namespace

absl::StatusOr<std::string> PackDirectory(const std::string& dir, int64_t max_bytes) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("working directory ", dir, " is not a directory"));
  }
  std::string out;
  PackageLimits limits;
  limits.max_bytes = max_bytes;
  PackProgress progress{limits};
  if (auto status = PackInto(dir, "", 0, max_bytes, &progress, &out); !status.ok()) return status;
  if (auto status = CheckPackage(out, limits); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot pack the working directory ", dir, ": ", status.message()));
  }
  return out;
}

absl::Status CheckPackage(const std::string& package, const PackageLimits& limits) {
  return ParsePackage(package, limits).status();
}

absl::Status UnpackDirectory(const std::string& package, const std::string& dir,
                             const PackageLimits& limits) {
  // Check every entry before writing anything.
  TROUPE_ASSIGN_OR_RETURN(std::vector<Entry> entries, ParsePackage(package, limits));
  const size_t slash = dir.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : dir.substr(0, slash);
  const std::string name = slash == std::string::npos ? dir : dir.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot unpack into '", dir, "': name a directory"));
  }
  TROUPE_RETURN_IF_ERROR(MakeDirs(parent));
  // Unpack next to the target (same file system, so the rename is atomic), then move it in.
  std::string staging = absl::StrCat(parent, "/.", name, ".unpacking-XXXXXX");
  if (mkdtemp(staging.data()) == nullptr) return Errno("mkdtemp", staging);
  auto discard = [&](absl::Status status) {
    (void)RemoveTree(staging);  // never follows symlinks; `status` is what the caller needs
    return status;
  };
  const int root_fd = open(staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root_fd < 0) return discard(Errno("open", staging));
  for (const Entry& entry : entries) {
    if (absl::Status status = WriteEntry(root_fd, package, entry, dir); !status.ok()) {
      close(root_fd);
      return discard(status);
    }
  }
  const bool opened = fchmod(root_fd, 0755) == 0;
  close(root_fd);
  if (!opened) return discard(Errno("chmod", staging));
  // rename() replaces an empty directory and never follows a symlink at `dir` (it fails instead).
  if (rename(staging.c_str(), dir.c_str()) != 0) {
    const int error = errno;
    return discard(absl::FailedPreconditionError(
        absl::StrCat("cannot unpack into ", dir, ": ", std::strerror(error),
                     error == ENOTEMPTY || error == EEXIST || error == ENOTDIR
                         ? " (it must not exist, or be an empty directory; remove it first)"
                         : "")));
  }
  return absl::OkStatus();
}

}  // namespace troupe
