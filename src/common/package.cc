#include "src/common/package.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace troupe {
namespace {

template <typename T>
void Append(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

absl::Status PackInto(const std::string& root, const std::string& relative, int64_t max_bytes,
                      std::string* out) {
  const std::string dir = relative.empty() ? root : root + "/" + relative;
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
      if (auto status = PackInto(root, rel, max_bytes, out); !status.ok()) return status;
    } else if (S_ISREG(st.st_mode)) {
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
      Append<uint32_t>(out, static_cast<uint32_t>(st.st_mode & 0777));
      Append<uint64_t>(out, content.size());
      out->append(content);
    }
  }
  return absl::OkStatus();
}

absl::Status MakeParents(const std::string& path) {
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    std::string parent = path.substr(0, pos);
    if (mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("mkdir ", parent, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> PackDirectory(const std::string& dir, int64_t max_bytes) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("working directory ", dir, " is not a directory"));
  }
  std::string out;
  if (auto status = PackInto(dir, "", max_bytes, &out); !status.ok()) return status;
  return out;
}

absl::Status UnpackDirectory(const std::string& package, const std::string& dir) {
  size_t pos = 0;
  auto read = [&](void* out, size_t n) {
    if (pos + n > package.size()) return false;
    std::memcpy(out, package.data() + pos, n);
    pos += n;
    return true;
  };
  while (pos < package.size()) {
    uint32_t path_size, mode;
    uint64_t size;
    if (!read(&path_size, 4) || pos + path_size > package.size()) {
      return absl::DataLossError("truncated package (path)");
    }
    std::string rel = package.substr(pos, path_size);
    pos += path_size;
    if (!read(&mode, 4) || !read(&size, 8) || pos + size > package.size()) {
      return absl::DataLossError("truncated package (file)");
    }
    if (rel.empty() || rel[0] == '/' || absl::StrContains(rel, "..")) {
      return absl::DataLossError(absl::StrCat("package path '", rel, "' leaves the directory"));
    }
    const std::string path = dir + "/" + rel;
    if (auto status = MakeParents(path); !status.ok()) return status;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(package.data() + pos, static_cast<std::streamsize>(size));
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
    out.close();
    chmod(path.c_str(), mode);
    pos += size;
  }
  return absl::OkStatus();
}

}  // namespace troupe
