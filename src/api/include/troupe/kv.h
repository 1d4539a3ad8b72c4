// troupe::kv: the cluster's key-value store for user data, kept by the GCS (Ray's internal KV
// made public), in namespaces: what one job writes, any later job of the cluster in the same
// namespace reads, until it is deleted (or the head stops, unless the GCS runs on Redis).
//
//   troupe::kv::Put("model/best", checkpoint_path);                 // this job's namespace
//   std::optional<std::string> path = troupe::kv::Get("model/best");
//   for (const std::string& key : troupe::kv::List("model/")) ...
//   troupe::kv::PutOptions shared;
//   shared.ns = "shared";
//   troupe::kv::Put("epoch", "7", shared);                          // another namespace
//
// `ns` "" (the default) is the namespace of this job (Config::namespace_name, "default" unless
// set). User namespaces are stored apart from Troupe's own entries (the GCS keeps them under a
// "user/" prefix): no key or prefix given here can read or overwrite Troupe's internal data, and
// List never returns it. Limits, checked before anything is sent (InvalidArgumentError naming
// the limit and the size): keys 1 to 4096 bytes, values up to 16 MiB, namespaces 1 to 256
// printable ASCII characters. The cluster's KV as a whole has a quota (`troupe start --head
// --kv-quota`); a Put past it throws TroupeError saying so.
// Thread-safety: any thread, after Init (or inside a task or actor call). Each call is one
// round trip to the GCS; ClusterUnreachableError when it cannot be reached.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::kv {

inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = 16u << 20;
inline constexpr size_t kMaxNamespaceBytes = 256;

struct PutOptions {
  bool overwrite = true;  // false: keep an existing value (Put then returns false)
  std::string ns;         // "": this job's namespace
};

// Stores `value` under `key`. Returns true if the key was new, false if it existed (then the
// value was replaced only if `overwrite`).
bool Put(const std::string& key, const std::string& value, const PutOptions& options = {});
// The value, or nullopt if there is no such key.
std::optional<std::string> Get(const std::string& key, const std::string& ns = "");
bool Exists(const std::string& key, const std::string& ns = "");
// Returns true if the key existed.
bool Delete(const std::string& key, const std::string& ns = "");
// Keys starting with `prefix` ("" lists every key of the namespace), sorted.
std::vector<std::string> List(const std::string& prefix, const std::string& ns = "");

}  // namespace troupe::kv
