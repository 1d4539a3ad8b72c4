// How values travel: msgpack (libmsgpack-cxx) for everything, except top-level vectors of numbers
// and byte buffers, which are copied as raw bytes (no per-element encoding), and can be read
// back without a copy as troupe::ArrayView<T>.
// Every payload starts with one format byte:
//   0x00 msgpack     the rest is one msgpack value
//   0x01 raw array   1 byte element type code, 8 bytes little-endian count, then the elements
// User types become serializable with MSGPACK_DEFINE(members...) inside the type (or a msgpack
// adaptor). Using a type that is not gives a compile-time error naming the type and the fix.
// Stateless; thread-safe.
#pragma once

#include <array>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <msgpack.hpp>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "troupe/errors.h"
#include "troupe/runtime.h"

namespace troupe {

// A read-only view of a numeric array that lives in an object: Get<ArrayView<float>>(ref) on a
// Put(std::vector<float>) aliases the object store's shared memory instead of copying it.
template <typename T>
class ArrayView {
  static_assert(std::is_arithmetic_v<T>, "ArrayView<T> needs a numeric T");

 public:
  ArrayView() = default;
  ArrayView(const T* data, size_t size, std::shared_ptr<const void> holder)
      : data_(data), size_(size), holder_(std::move(holder)) {}
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  std::vector<T> ToVector() const { return std::vector<T>(begin(), end()); }

 private:
  const T* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> holder_;
};

template <typename T>
class ObjectRef;

namespace internal {

inline constexpr uint8_t kFormatMsgpack = 0x00;
inline constexpr uint8_t kFormatRawArray = 0x01;
inline constexpr size_t kRawHeaderSize = 1 + 1 + 8;

// ---- Which types can be serialized (checked at compile time) ----

template <typename T, typename = void>
struct HasMsgpackDefine : std::false_type {};
template <typename T>
struct HasMsgpackDefine<
    T, std::void_t<decltype(&T::template msgpack_pack<msgpack::packer<msgpack::sbuffer>>)>>
    : std::true_type {};

template <typename T, typename = void>
struct IsSerializable : std::bool_constant<std::is_arithmetic_v<T> || std::is_enum_v<T> ||
                                           HasMsgpackDefine<T>::value> {};
template <typename T>
struct IsSerializable<const T> : IsSerializable<T> {};
template <>
struct IsSerializable<std::string> : std::true_type {};
template <>
struct IsSerializable<msgpack::type::nil_t> : std::true_type {};
template <typename T>
struct IsSerializable<ObjectRef<T>> : std::true_type {};
template <typename T, typename A>
struct IsSerializable<std::vector<T, A>> : IsSerializable<T> {};
template <typename T, size_t N>
struct IsSerializable<std::array<T, N>> : IsSerializable<T> {};
template <typename T>
struct IsSerializable<std::list<T>> : IsSerializable<T> {};
template <typename T>
struct IsSerializable<std::deque<T>> : IsSerializable<T> {};
template <typename T>
struct IsSerializable<std::set<T>> : IsSerializable<T> {};
template <typename T>
struct IsSerializable<std::unordered_set<T>> : IsSerializable<T> {};
template <typename T>
struct IsSerializable<std::optional<T>> : IsSerializable<T> {};
template <typename K, typename V>
struct IsSerializable<std::map<K, V>>
    : std::bool_constant<IsSerializable<K>::value && IsSerializable<V>::value> {};
template <typename K, typename V>
struct IsSerializable<std::unordered_map<K, V>>
    : std::bool_constant<IsSerializable<K>::value && IsSerializable<V>::value> {};
template <typename A, typename B>
struct IsSerializable<std::pair<A, B>>
    : std::bool_constant<IsSerializable<A>::value && IsSerializable<B>::value> {};
template <typename... Ts>
struct IsSerializable<std::tuple<Ts...>> : std::bool_constant<(IsSerializable<Ts>::value && ...)> {
};

// Instantiated for a type that cannot be serialized: the compiler's message names T.
template <typename T>
struct RequireSerializable {
  static_assert(IsSerializable<T>::value,
                "troupe: this argument or result type cannot be serialized (the type is named in "
                "the 'required from' lines, as T). Fix: add MSGPACK_DEFINE(member1, member2, ...) "
                "inside the type, or write a msgpack adaptor for it; pointers, references to "
                "non-copyable objects and raw function pointers cannot be sent.");
  static constexpr bool value = true;
};

template <typename T>
struct IsRawArray : std::false_type {};
template <typename T, typename A>
struct IsRawArray<std::vector<T, A>>
    : std::bool_constant<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>> {};

template <typename T>
constexpr uint8_t ElementTypeCode() {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<uint8_t>(0x10 | sizeof(T));
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<uint8_t>(0x20 | sizeof(T));
  } else {
    return static_cast<uint8_t>(0x30 | sizeof(T));
  }
}

// ObjectRefs met while packing a value, so the runtime keeps them alive with the value.
std::vector<RefInfo>*& ContainedRefsCollector();

// memcpy, split over two threads for large copies (a Put of a big array into shared memory):
// one copying thread does not reach the memory bandwidth (on the project's 2-core VM, 8 GB/s
// with one thread, 11-13 GB/s with two). Small copies stay on the calling thread.
void CopyBytes(char* out, const void* in, size_t size);

// A serialized value: `prefix` (format byte + msgpack or raw header) then optionally `raw`
// bytes that are copied straight from the source vector.
struct SerializedValue {
  std::string prefix;
  const void* raw = nullptr;
  size_t raw_size = 0;
  std::vector<RefInfo> contained_refs;

  size_t size() const { return prefix.size() + raw_size; }
  void CopyTo(char* out) const {
    std::memcpy(out, prefix.data(), prefix.size());
    if (raw_size > 0) CopyBytes(out + prefix.size(), raw, raw_size);
  }
  std::string ToString() const {
    std::string out(size(), '\0');
    CopyTo(out.data());
    return out;
  }
};

// Serializes `value`; the result may point into `value` (raw arrays), so keep it alive.
template <typename T>
SerializedValue Serialize(const T& value) {
  static_assert(RequireSerializable<std::decay_t<T>>::value);
  SerializedValue out;
  if constexpr (IsRawArray<std::decay_t<T>>::value) {
    using Element = typename std::decay_t<T>::value_type;
    out.prefix.resize(kRawHeaderSize);
    out.prefix[0] = static_cast<char>(kFormatRawArray);
    out.prefix[1] = static_cast<char>(ElementTypeCode<Element>());
    uint64_t count = value.size();
    std::memcpy(out.prefix.data() + 2, &count, 8);
    out.raw = value.data();
    out.raw_size = value.size() * sizeof(Element);
  } else {
    msgpack::sbuffer buffer;
    buffer.write(reinterpret_cast<const char*>(&kFormatMsgpack), 1);
    std::vector<RefInfo>* previous = ContainedRefsCollector();
    ContainedRefsCollector() = &out.contained_refs;
    msgpack::pack(buffer, value);
    ContainedRefsCollector() = previous;
    out.prefix.assign(buffer.data(), buffer.size());
  }
  return out;
}

[[noreturn]] void ThrowDecodeError(const std::string& what);

// Decodes a payload as T. `holder` keeps the bytes alive for zero-copy views.
template <typename T>
std::shared_ptr<T> Deserialize(const Buffer& buffer) {
  static_assert(RequireSerializable<T>::value);
  if (buffer.size < 1) ThrowDecodeError("empty payload");
  const uint8_t format = static_cast<uint8_t>(buffer.data[0]);
  if constexpr (IsRawArray<T>::value) {
    if (format == kFormatRawArray) {
      using Element = typename T::value_type;
      if (buffer.size < kRawHeaderSize ||
          static_cast<uint8_t>(buffer.data[1]) != ElementTypeCode<Element>()) {
        ThrowDecodeError("the object holds an array of another element type");
      }
      uint64_t count;
      std::memcpy(&count, buffer.data + 2, 8);
      if (kRawHeaderSize + count * sizeof(Element) > buffer.size)
        ThrowDecodeError("truncated array");
      auto out = std::make_shared<T>(count);
      if (count > 0)
        std::memcpy(out->data(), buffer.data + kRawHeaderSize, count * sizeof(Element));
      return out;
    }
  }
  if (format != kFormatMsgpack) ThrowDecodeError("the object does not hold this type");
  try {
    msgpack::object_handle handle = msgpack::unpack(buffer.data + 1, buffer.size - 1);
    return std::make_shared<T>(handle.get().as<T>());
  } catch (const msgpack::type_error&) {
    ThrowDecodeError("the object holds a different type");
  } catch (const std::exception& e) {
    ThrowDecodeError(e.what());
  }
}

template <typename T>
struct IsArrayView : std::false_type {};
template <typename T>
struct IsArrayView<ArrayView<T>> : std::true_type {};

// ArrayView<T> aliases the payload (zero-copy) instead of decoding it.
template <typename V>
std::shared_ptr<V> DeserializeView(const Buffer& buffer) {
  using Element = std::remove_const_t<std::remove_pointer_t<decltype(std::declval<V>().data())>>;
  if (buffer.size < kRawHeaderSize || static_cast<uint8_t>(buffer.data[0]) != kFormatRawArray ||
      static_cast<uint8_t>(buffer.data[1]) != ElementTypeCode<Element>()) {
    ThrowDecodeError("ArrayView needs an object made from a std::vector of the same element type");
  }
  uint64_t count;
  std::memcpy(&count, buffer.data + 2, 8);
  if (kRawHeaderSize + count * sizeof(Element) > buffer.size) ThrowDecodeError("truncated array");
  return std::make_shared<V>(reinterpret_cast<const Element*>(buffer.data + kRawHeaderSize), count,
                             buffer.holder);
}

template <typename T>
std::shared_ptr<T> DecodeObject(const Buffer& buffer) {
  if constexpr (IsArrayView<T>::value) {
    return DeserializeView<T>(buffer);
  } else {
    return Deserialize<T>(buffer);
  }
}

}  // namespace internal
}  // namespace troupe
