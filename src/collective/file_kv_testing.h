// Test and benchmark support: the GCS KV's role in Mesh rendezvous, played by files in a
// directory that every member process sees (forked members, or members in other network
// namespaces sharing the filesystem). Stateless; each call touches one file (writes are atomic
// renames), so members in several processes may use one directory at once.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "src/collective/mesh.h"

namespace troupe::collective {

inline std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// Readers see all of `value` or nothing.
inline void WriteTestFile(const std::string& path, const std::string& value) {
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  std::ofstream(temporary) << value;
  std::rename(temporary.c_str(), path.c_str());
}

inline KvAccess FileKv(const std::string& dir) {
  auto path = [dir](const std::string& key) {
    return dir + "/" + absl::StrReplaceAll(key, {{"/", "#"}});
  };
  return {[path](const std::string& key) -> std::optional<std::string> {
            if (access(path(key).c_str(), F_OK) != 0) return std::nullopt;
            return ReadTestFile(path(key));
          },
          [path](const std::string& key, const std::string& value) {
            WriteTestFile(path(key), value);
          },
          [path](const std::string& key) { unlink(path(key).c_str()); }};
}

}  // namespace troupe::collective
