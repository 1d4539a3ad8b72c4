#include "src/common/ids.h"

#include <pthread.h>
#include <sys/random.h>

#include <atomic>
#include <cerrno>

#include "src/common/logging.h"

namespace troupe {

void FillRandomBytes(uint8_t* out, size_t size) {
  size_t filled = 0;
  while (filled < size) {
    ssize_t n = getrandom(out + filled, size - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    TROUPE_CHECK(n > 0) << "getrandom failed: errno " << errno;
    filled += static_cast<size_t>(n);
  }
}

namespace {
// Bumped in a forked child: every thread's block of random bytes is stale there.
std::atomic<uint64_t> fork_generation{0};
void OnForkInChild() { fork_generation.fetch_add(1, std::memory_order_relaxed); }

struct RandomBlock {
  uint8_t bytes[512];
  size_t used = sizeof(bytes);  // empty until first use
  uint64_t generation = 0;
};
}  // namespace

void FillRandomIdBytes(uint8_t* out, size_t size) {
  static const bool registered = pthread_atfork(nullptr, nullptr, OnForkInChild) == 0;
  TROUPE_CHECK(registered) << "pthread_atfork failed";
  thread_local RandomBlock block;
  if (size > sizeof(block.bytes)) return FillRandomBytes(out, size);
  const uint64_t generation = fork_generation.load(std::memory_order_relaxed);
  if (block.used + size > sizeof(block.bytes) || block.generation != generation) {
    FillRandomBytes(block.bytes, sizeof(block.bytes));
    block.used = 0;
    block.generation = generation;
  }
  std::memcpy(out, block.bytes + block.used, size);
  block.used += size;
}

std::string BytesToHex(std::string_view data) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(data.size() * 2, '0');
  for (size_t i = 0; i < data.size(); ++i) {
    const auto byte = static_cast<uint8_t>(data[i]);
    hex[2 * i] = kDigits[byte >> 4];
    hex[2 * i + 1] = kDigits[byte & 0xf];
  }
  return hex;
}

namespace {
int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

absl::StatusOr<std::string> HexToBytes(std::string_view hex) {
  if (hex.size() % 2 != 0) {
    return absl::InvalidArgumentError("hex string has odd length " + std::to_string(hex.size()));
  }
  std::string bytes(hex.size() / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    int hi = HexDigitValue(hex[2 * i]);
    int lo = HexDigitValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError("not a hex digit at position " + std::to_string(2 * i));
    }
    bytes[i] = static_cast<char>((hi << 4) | lo);
  }
  return bytes;
}

std::string JobKvNamespace(const JobId& job_id) { return "job-" + job_id.Hex(); }

JobId JobId::FromInt(uint32_t value) {
  JobId id;
  for (int i = 0; i < 4; ++i) id.bytes_[i] = static_cast<uint8_t>(value >> (8 * (3 - i)));
  return id;
}

uint32_t JobId::ToInt() const {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value = (value << 8) | bytes_[i];
  return value;
}

ObjectId ObjectId::FromIndex(const TaskId& task_id, uint32_t index) {
  ObjectId id;
  std::memcpy(id.bytes_.data(), task_id.data(), TaskId::Size());
  for (int i = 0; i < 4; ++i) {
    id.bytes_[TaskId::Size() + i] = static_cast<uint8_t>(index >> (8 * (3 - i)));
  }
  return id;
}

TaskId ObjectId::CreatingTaskId() const {
  return *TaskId::FromBinary(Binary().substr(0, TaskId::Size()));
}

uint32_t ObjectId::Index() const {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value = (value << 8) | bytes_[TaskId::Size() + i];
  return value;
}

}  // namespace troupe
