// Non-template pieces of the API headers: the function registry, the current runtime pointer,
// error helpers, and the bulk copy behind SerializedValue::CopyTo.
#include <cxxabi.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>

#include "troupe/api.h"

namespace troupe {

std::string HexOf(const std::string& binary) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(binary.size() * 2, '0');
  for (size_t i = 0; i < binary.size(); ++i) {
    const auto byte = static_cast<unsigned char>(binary[i]);
    hex[2 * i] = kDigits[byte >> 4];
    hex[2 * i + 1] = kDigits[byte & 0xf];
  }
  return hex;
}

std::optional<PlacementGroup> GetPlacementGroupById(const std::string& hex_id) {
  internal::Runtime* runtime = internal::CurrentRuntime();
  if (runtime == nullptr) internal::ThrowNotInitialized();
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string binary;
  for (size_t i = 0; i + 1 < hex_id.size(); i += 2) {
    const int high = digit(hex_id[i]), low = digit(hex_id[i + 1]);
    if (high < 0 || low < 0) break;
    binary.push_back(static_cast<char>(high * 16 + low));
  }
  if (hex_id.empty() || binary.size() * 2 != hex_id.size()) {
    throw InvalidArgumentError("GetPlacementGroupById: '" + hex_id +
                               "' is not a placement group ID (hex, as PlacementGroup::ID() and "
                               "`troupe list placement-groups` print it)");
  }
  if (!runtime->GetPlacementGroupInfo(binary)) return std::nullopt;
  return PlacementGroup(binary);
}

namespace internal {
namespace {
std::atomic<Runtime*> current_runtime{nullptr};
}  // namespace

Runtime* CurrentRuntime() { return current_runtime.load(std::memory_order_acquire); }
void SetCurrentRuntime(Runtime* runtime) {
  current_runtime.store(runtime, std::memory_order_release);
}

std::vector<RefInfo>*& ContainedRefsCollector() {
  thread_local std::vector<RefInfo>* collector = nullptr;
  return collector;
}

void CopyBytes(char* out, const void* in, size_t size) {
  // Below this a thread's start (tens of microseconds) costs more than the second stream saves.
  constexpr size_t kParallelCopyMinBytes = 16 << 20;
  const char* from = static_cast<const char*>(in);
  if (size < kParallelCopyMinBytes || std::thread::hardware_concurrency() < 2) {
    std::memcpy(out, from, size);
    return;
  }
  const size_t half = size / 2 / 4096 * 4096;  // each thread writes whole pages
  std::thread second;
  try {
    second = std::thread([=] { std::memcpy(out + half, from + half, size - half); });
  } catch (const std::system_error&) {  // no thread to be had: copy it all here
    std::memcpy(out, from, size);
    return;
  }
  std::memcpy(out, from, half);
  second.join();
}

void ThrowDecodeError(const std::string& what) {
  throw SerializationError("cannot decode the value: " + what +
                           " (does the ObjectRef's type match what the task returned?)");
}

void ThrowArityError(size_t expected, size_t got) {
  throw SerializationError("the function takes " + std::to_string(expected) + " arguments, got " +
                           std::to_string(got));
}

void ThrowNumReturnsError(int num_returns, size_t tuple_size) {
  throw SerializationError("the call asked for " + std::to_string(num_returns) +
                           " return objects, but the function returns " +
                           (tuple_size == 0
                                ? std::string("no std::tuple")
                                : "a std::tuple of " + std::to_string(tuple_size) + " values") +
                           " (is the worker running the same build as the caller?)");
}

void ThrowNotInitialized() {
  throw RuntimeError("Troupe is not initialized: call troupe::Init() first");
}

FunctionRegistry& FunctionRegistry::Instance() {
  static auto* registry = new FunctionRegistry();  // never destroyed: used until exit
  return *registry;
}

const FunctionInvoker* FunctionRegistry::FindFunction(const std::string& name) const {
  auto it = functions_.find(name);
  return it == functions_.end() ? nullptr : &it->second;
}

const CreatorInvoker* FunctionRegistry::FindCreator(const std::string& name) const {
  auto it = creators_.find(name);
  return it == creators_.end() ? nullptr : &it->second;
}

const MethodInvoker* FunctionRegistry::FindMethod(const std::string& name) const {
  auto it = methods_.find(name);
  return it == methods_.end() ? nullptr : &it->second;
}

void FunctionRegistry::ThrowNotRegistered() {
  throw TroupeError(
      "this function is not registered for remote calls: add TROUPE_REMOTE(the_function) at "
      "namespace scope in a .cc file of this executable");
}

std::vector<std::string> SplitFunctionNames(const std::string& text) {
  std::vector<std::string> names;
  std::string current;
  int depth = 0;
  auto flush = [&] {
    size_t begin = current.find_first_not_of(" \t\n");
    size_t end = current.find_last_not_of(" \t\n");
    names.push_back(begin == std::string::npos ? "" : current.substr(begin, end - begin + 1));
    current.clear();
  };
  for (char c : text) {
    if (c == '(' || c == '<' || c == '[') ++depth;
    if (c == ')' || c == '>' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      flush();
    } else {
      current += c;
    }
  }
  flush();
  return names;
}

std::string DemangledName(const char* mangled) {
  int status = 0;
  char* name = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = status == 0 && name ? name : mangled;
  std::free(name);
  return out;
}

std::string DemangledTypeName(const std::type_info& type) { return DemangledName(type.name()); }

}  // namespace internal
}  // namespace troupe
