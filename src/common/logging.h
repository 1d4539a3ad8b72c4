// Minimal line logging to stderr (daemons redirect stderr to their log file), and CHECK for
// programmer errors. Debian's Abseil 20220623 has no absl/log. Thread-safe: each line is written
// with one write() call.
#pragma once

#include <sstream>
#include <string>

namespace troupe {

enum class LogSeverity { kDebug, kInfo, kWarning, kError, kFatal };

// Lines below this severity are dropped. Set once at start-up (TROUPE_LOG_LEVEL=debug|info|...).
void SetMinLogSeverity(LogSeverity severity);
LogSeverity MinLogSeverity();

// Collects one log line and writes it when destroyed; aborts after writing if kFatal.
class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Swallows the stream when a line is filtered out.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace troupe

#define TROUPE_LOG(severity)                                        \
  (::troupe::LogSeverity::k##severity < ::troupe::MinLogSeverity()) \
      ? (void)0                                                     \
      : ::troupe::LogVoidify() &                                    \
            ::troupe::LogMessage(::troupe::LogSeverity::k##severity, __FILE__, __LINE__).stream()

#define TROUPE_CHECK(cond)                                                                      \
  (cond) ? (void)0                                                                              \
         : ::troupe::LogVoidify() &                                                             \
               ::troupe::LogMessage(::troupe::LogSeverity::kFatal, __FILE__, __LINE__).stream() \
                   << "Check failed: " #cond " "
