#include "src/http/dashboard_sessions.h"

#include <algorithm>
#include <fstream>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/common/sha256.h"

namespace troupe::http {
namespace {

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (urandom.read(raw.data(), static_cast<std::streamsize>(bytes))) {
    return absl::BytesToHexString(raw);
  }
  // No /dev/urandom (not on Linux as we know it): the OS generator behind random_device.
  std::random_device random;
  for (char& c : raw) c = static_cast<char>(random());
  return absl::BytesToHexString(raw);
}

}  // namespace

std::string CookieValue(const std::string& cookie_header, const std::string& name) {
  for (absl::string_view part : absl::StrSplit(cookie_header, ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, name) && absl::ConsumePrefix(&part, "=")) {
      return std::string(part);
    }
  }
  return "";
}

SessionStore::SessionStore(absl::Duration lifetime, size_t max_sessions, Clock clock)
    : lifetime_(lifetime), max_sessions_(max_sessions), clock_(std::move(clock)) {}

std::string SessionStore::Create() {
  std::string id = RandomHex(32);
  absl::MutexLock lock(&mu_);
  DropExpiredLocked();
  while (expiry_.size() >= max_sessions_ && !expiry_.empty()) {
    auto oldest = expiry_.begin();
    for (auto it = expiry_.begin(); it != expiry_.end(); ++it) {
      if (it->second < oldest->second) oldest = it;
    }
    expiry_.erase(oldest);
  }
  expiry_[Sha256Hex(id)] = clock_() + lifetime_;
  return id;
}

bool SessionStore::Valid(const std::string& id) {
  if (id.empty()) return false;
  const std::string key = Sha256Hex(id);
  absl::MutexLock lock(&mu_);
  auto it = expiry_.find(key);
  if (it == expiry_.end()) return false;
  if (clock_() >= it->second) {
    expiry_.erase(it);
    return false;
  }
  return true;
}

void SessionStore::Remove(const std::string& id) {
  const std::string key = Sha256Hex(id);
  absl::MutexLock lock(&mu_);
  expiry_.erase(key);
}

size_t SessionStore::size() {
  absl::MutexLock lock(&mu_);
  DropExpiredLocked();
  return expiry_.size();
}

void SessionStore::DropExpiredLocked() {
  const absl::Time now = clock_();
  for (auto it = expiry_.begin(); it != expiry_.end();) {
    it = now >= it->second ? expiry_.erase(it) : std::next(it);
  }
}

}  // namespace troupe::http
