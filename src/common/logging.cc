#include "src/common/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace troupe {
namespace {

std::atomic<LogSeverity> min_severity{LogSeverity::kInfo};

const char* SeverityLetter(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kDebug:
      return "D";
    case LogSeverity::kInfo:
      return "I";
    case LogSeverity::kWarning:
      return "W";
    case LogSeverity::kError:
      return "E";
    case LogSeverity::kFatal:
      return "F";
  }
  return "?";
}

const char* BaseName(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) { min_severity = severity; }
LogSeverity MinLogSeverity() { return min_severity; }

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) : severity_(severity) {
  stream_ << "[" << absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::Now(), absl::LocalTimeZone())
          << " " << SeverityLetter(severity) << " " << getpid() << " " << BaseName(file) << ":"
          << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << "\n";
  const std::string line = stream_.str();
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace troupe
