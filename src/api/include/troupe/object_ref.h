// ObjectRef<T>: a reference to a value that lives somewhere in the cluster (returned by a task or
// by Put). Copies share the value; when the last ObjectRef to an object anywhere in the cluster
// is gone, the object is freed. ObjectRefs can be passed to tasks (resolved to the value first,
// when the parameter is a T) and put inside other values (the receiver borrows the reference).
// Thread-compatible; the reference counting behind it is thread-safe.
#pragma once

#include <msgpack.hpp>
#include <string>
#include <utility>

#include "troupe/runtime.h"
#include "troupe/serialization.h"

namespace troupe {

std::string HexOf(const std::string& binary);

template <typename T>
class ObjectRef {
 public:
  using ValueType = T;

  ObjectRef() = default;
  // Takes one new local reference to `info`.
  explicit ObjectRef(internal::RefInfo info) : info_(std::move(info)) { AddRef(); }
  ObjectRef(const ObjectRef& other) : info_(other.info_) { AddRef(); }
  ObjectRef(ObjectRef&& other) noexcept : info_(std::move(other.info_)) { other.info_ = {}; }
  ObjectRef& operator=(const ObjectRef& other) {
    if (this != &other) {
      Release();
      info_ = other.info_;
      AddRef();
    }
    return *this;
  }
  ObjectRef& operator=(ObjectRef&& other) noexcept {
    if (this != &other) {
      Release();
      info_ = std::move(other.info_);
      other.info_ = {};
    }
    return *this;
  }
  ~ObjectRef() { Release(); }

  bool IsNil() const { return info_.object_id.empty(); }
  // The object ID in hex.
  std::string ID() const { return HexOf(info_.object_id); }
  const internal::RefInfo& info() const { return info_; }
  bool operator==(const ObjectRef& other) const { return info_.object_id == other.info_.object_id; }

  // msgpack: an ObjectRef inside a value travels as [id, owner address].
  template <typename Packer>
  void msgpack_pack(Packer& packer) const {
    packer.pack_array(2);
    packer.pack(info_.object_id);
    packer.pack(info_.owner_address);
    if (auto* collector = internal::ContainedRefsCollector(); collector && !IsNil()) {
      collector->push_back(info_);
    }
  }
  void msgpack_unpack(const msgpack::object& object) {
    if (object.type != msgpack::type::ARRAY || object.via.array.size != 2) {
      throw msgpack::type_error();
    }
    Release();
    info_.object_id = object.via.array.ptr[0].as<std::string>();
    info_.owner_address = object.via.array.ptr[1].as<std::string>();
    AddRef();
  }

 private:
  void AddRef() {
    if (IsNil()) return;
    if (auto* runtime = internal::CurrentRuntime()) runtime->AddLocalRef(info_);
  }
  void Release() {
    if (IsNil()) return;
    if (auto* runtime = internal::CurrentRuntime()) runtime->RemoveLocalRef(info_.object_id);
    info_ = {};
  }

  internal::RefInfo info_;
};

}  // namespace troupe
