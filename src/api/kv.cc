// troupe::kv (troupe/kv.h): the checks and the "user/" namespace prefix in front of the GCS KV.
#include "troupe/kv.h"

#include <string>

#include "src/schema/kv_schema.h"
#include "troupe/errors.h"
#include "troupe/runtime.h"
#include "troupe/runtime_context.h"

namespace troupe::kv {
namespace {

internal::Runtime& RuntimeOrThrow() {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  return *runtime;
}

// The GCS namespace of user namespace `ns` ("" = this job's), after checking it.
std::string StoreNamespace(internal::Runtime& runtime, const char* call, const std::string& ns) {
  const std::string name = ns.empty() ? runtime.GetRuntimeContext().namespace_name : ns;
  if (name.empty() || name.size() > kMaxNamespaceBytes) {
    throw InvalidArgumentError(std::string("kv::") + call + ": the namespace has " +
                               std::to_string(name.size()) + " bytes; allowed: 1 to " +
                               std::to_string(kMaxNamespaceBytes));
  }
  for (char c : name) {
    if (c < 0x20 || c > 0x7e) {
      throw InvalidArgumentError(std::string("kv::") + call + ": the namespace '" + name +
                                 "' has a byte that is not printable ASCII; use letters, digits "
                                 "and punctuation");
    }
  }
  return kUserKvNamespacePrefix + name;
}

void CheckKey(const char* call, const std::string& key) {
  if (key.empty()) {
    throw InvalidArgumentError(std::string("kv::") + call +
                               ": the key is empty; give a key of 1 to " +
                               std::to_string(kMaxKeyBytes) + " bytes");
  }
  if (key.size() > kMaxKeyBytes) {
    throw InvalidArgumentError(std::string("kv::") + call + ": the key has " +
                               std::to_string(key.size()) + " bytes; at most " +
                               std::to_string(kMaxKeyBytes) +
                               " (put long identifiers in the value, or hash them)");
  }
}

}  // namespace

bool Put(const std::string& key, const std::string& value, const PutOptions& options) {
  internal::Runtime& runtime = RuntimeOrThrow();
  CheckKey("Put", key);
  if (value.size() > kMaxValueBytes) {
    throw InvalidArgumentError("kv::Put: the value for '" + key.substr(0, 64) + "' has " +
                               std::to_string(value.size()) + " bytes; at most " +
                               std::to_string(kMaxValueBytes) +
                               " (16 MiB): put large data in the object store (troupe::Put) or "
                               "a file, and its reference or path here");
  }
  return runtime.KvPut(StoreNamespace(runtime, "Put", options.ns), key, value, options.overwrite);
}

std::optional<std::string> Get(const std::string& key, const std::string& ns) {
  internal::Runtime& runtime = RuntimeOrThrow();
  CheckKey("Get", key);
  return runtime.KvGet(StoreNamespace(runtime, "Get", ns), key);
}

bool Exists(const std::string& key, const std::string& ns) {
  internal::Runtime& runtime = RuntimeOrThrow();
  CheckKey("Exists", key);
  return runtime.KvExists(StoreNamespace(runtime, "Exists", ns), key);
}

bool Delete(const std::string& key, const std::string& ns) {
  internal::Runtime& runtime = RuntimeOrThrow();
  CheckKey("Delete", key);
  return runtime.KvDelete(StoreNamespace(runtime, "Delete", ns), key, /*by_prefix=*/false) > 0;
}

std::vector<std::string> List(const std::string& prefix, const std::string& ns) {
  internal::Runtime& runtime = RuntimeOrThrow();
  if (prefix.size() > kMaxKeyBytes) CheckKey("List", prefix);
  return runtime.KvKeys(StoreNamespace(runtime, "List", ns), prefix);
}

}  // namespace troupe::kv
