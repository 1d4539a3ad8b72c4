// Identifiers of every Troupe entity, in one place. Each is a fixed number of random (or derived)
// bytes, printed as lowercase hex; the nil ID is all 0xff bytes (as in Ray), so a zeroed buffer is
// never mistaken for "no ID". Value types; thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace troupe {

// Fills `out` with `size` bytes from the OS's random source (getrandom). Thread-safe.
void FillRandomBytes(uint8_t* out, size_t size);
// The same bytes for IDs, without a system call per ID: each thread hands out a 512-byte block
// of getrandom() output and refills it when used up, or when the process was forked (a child
// never repeats its parent's IDs). Thread-safe. Secrets (tokens) use FillRandomBytes.
void FillRandomIdBytes(uint8_t* out, size_t size);

// Lowercase hex of `data` and its inverse (fails on odd length or non-hex characters).
std::string BytesToHex(std::string_view data);
absl::StatusOr<std::string> HexToBytes(std::string_view hex);

template <typename Derived, size_t kSize>
class BaseId {
 public:
  static constexpr size_t Size() { return kSize; }

  // The nil ID: all bytes 0xff.
  BaseId() { bytes_.fill(0xff); }

  static Derived FromRandom() {
    Derived id;
    FillRandomIdBytes(id.bytes_.data(), kSize);
    return id;
  }
  // Fails unless `binary` is exactly Size() bytes.
  static absl::StatusOr<Derived> FromBinary(std::string_view binary) {
    if (binary.size() != kSize) {
      return absl::InvalidArgumentError(std::string(Derived::kName) + " must be " +
                                        std::to_string(kSize) + " bytes, got " +
                                        std::to_string(binary.size()));
    }
    Derived id;
    std::memcpy(id.bytes_.data(), binary.data(), kSize);
    return id;
  }
  // Fails unless `hex` is exactly 2 * Size() hex characters.
  static absl::StatusOr<Derived> FromHex(std::string_view hex) {
    auto binary = HexToBytes(hex);
    if (!binary.ok()) {
      return absl::InvalidArgumentError(std::string("bad ") + Derived::kName + " '" +
                                        std::string(hex) +
                                        "': " + std::string(binary.status().message()));
    }
    return FromBinary(*binary);
  }
  static Derived Nil() { return Derived(); }

  bool IsNil() const { return *this == Nil(); }
  std::string Binary() const { return std::string(reinterpret_cast<const char*>(data()), kSize); }
  std::string Hex() const { return BytesToHex(Binary()); }
  // The first 8 hex characters: enough to tell IDs apart in logs and tables.
  std::string ShortHex() const { return Hex().substr(0, 8); }
  const uint8_t* data() const { return bytes_.data(); }

  bool operator==(const BaseId& other) const { return bytes_ == other.bytes_; }
  bool operator!=(const BaseId& other) const { return bytes_ != other.bytes_; }
  bool operator<(const BaseId& other) const { return bytes_ < other.bytes_; }

  template <typename H>
  friend H AbslHashValue(H h, const BaseId& id) {
    return H::combine_contiguous(std::move(h), id.bytes_.data(), kSize);
  }

 protected:
  std::array<uint8_t, kSize> bytes_;
};

#define TROUPE_DEFINE_ID(Name, kBytes)          \
  class Name : public BaseId<Name, kBytes> {    \
   public:                                      \
    static constexpr const char* kName = #Name; \
  }

TROUPE_DEFINE_ID(ClusterId, 8);
TROUPE_DEFINE_ID(NodeId, 16);
TROUPE_DEFINE_ID(WorkerId, 16);
TROUPE_DEFINE_ID(ActorId, 16);
TROUPE_DEFINE_ID(TaskId, 16);
TROUPE_DEFINE_ID(PlacementGroupId, 16);
TROUPE_DEFINE_ID(LeaseId, 16);

#undef TROUPE_DEFINE_ID

// Jobs are numbered by the GCS in start order; the ID is the number, big-endian, in 4 bytes.
class JobId : public BaseId<JobId, 4> {
 public:
  static constexpr const char* kName = "JobId";
  static JobId FromInt(uint32_t value);
  uint32_t ToInt() const;
};

// The GCS KV namespace that belongs to a job: "job-<hex>". The GCS deletes it when the job ends,
// so per-job state (e.g. collective rendezvous keys) never outlives the job.
std::string JobKvNamespace(const JobId& job_id);

// An object is the `index`-th return (index >= 1) or the `index`-th put of the task that created
// it, so its owner can be derived from the ID: task ID bytes, then the index big-endian.
class ObjectId : public BaseId<ObjectId, TaskId::Size() + 4> {
 public:
  static constexpr const char* kName = "ObjectId";
  static ObjectId FromIndex(const TaskId& task_id, uint32_t index);
  TaskId CreatingTaskId() const;
  uint32_t Index() const;
};

}  // namespace troupe
