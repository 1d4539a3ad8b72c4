// Dashboard login sessions: the browser trades the cluster token for a random session id, kept
// in an HttpOnly cookie; the server keeps the ids with an expiry (absolute, from login) and
// forgets them on logout, on expiry, or when more than `max_sessions` exist (oldest first). Ids
// are 32 bytes from /dev/urandom, hex. Sessions live in this process's memory only: restarting the
// HTTP server logs everyone out. Thread-safe (one mutex); the clock is injected for tests.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/common/constant_time.h"

namespace troupe::http {

// The cookie that carries the session id.
inline constexpr char kSessionCookie[] = "troupe_session";

// The value of cookie `name` in a Cookie request header ("a=1; b=2"), "" if absent.
std::string CookieValue(const std::string& cookie_header, const std::string& name);

// (Secrets are compared with troupe::ConstantTimeEquals, src/common/constant_time.h.)

class SessionStore {
 public:
  using Clock = std::function<absl::Time()>;
  SessionStore(absl::Duration lifetime, size_t max_sessions, Clock clock = absl::Now);

  // A new session id, valid for `lifetime`.
  std::string Create();
  // True if `id` is a live session (not expired, not removed). Drops it once expired.
  bool Valid(const std::string& id);
  // Ends a session (logout); unknown ids are ignored.
  void Remove(const std::string& id);
  size_t size();

 private:
  void DropExpiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration lifetime_;
  const size_t max_sessions_;
  const Clock clock_;
  absl::Mutex mu_;
  // SHA-256 of the id -> when it ends. Looked up by hash so that the lookup's string
  // comparisons, whose time depends on how much matched, never touch a session id.
  std::map<std::string, absl::Time> expiry_ ABSL_GUARDED_BY(mu_);
};

}  // namespace troupe::http
