// Command-line flags for one command (`troupe start`, `troupe gcs-server`, ...). Each command
// declares its own flags, so an unknown flag or a bad value fails with a message naming the flag
// and the command, and `--help` prints exactly what that command takes. Not thread-safe; used
// once at start-up.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace troupe {

class FlagParser {
 public:
  // `command` is how users type it ("troupe start"); `summary` is printed at the top of --help.
  FlagParser(std::string command, std::string summary);

  // Each Add* binds --name to *target; the target's current value is the default shown in --help.
  void AddString(const std::string& name, std::string* target, const std::string& help);
  void AddInt(const std::string& name, int64_t* target, const std::string& help);
  void AddDouble(const std::string& name, double* target, const std::string& help);
  // --name, --name=true|false.
  void AddBool(const std::string& name, bool* target, const std::string& help);
  // A byte count: "1073741824", "512MiB", "4G", "1.5GB" (binary units either way).
  void AddBytes(const std::string& name, int64_t* target, const std::string& help);
  // Text appended to --help: what positional arguments mean, examples.
  void SetEpilog(std::string epilog) { epilog_ = std::move(epilog); }

  // Parses `args` (without the command words). Accepts --name=value and --name value; "--" ends
  // the flags and everything after it is positional. Returns InvalidArgument naming the flag.
  absl::Status Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  bool WasSet(const std::string& name) const { return set_flags_.count(name) > 0; }
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Usage() const;

 private:
  struct Flag {
    std::string help;
    std::string default_text;
    bool is_bool = false;
    // Stores the value; returns an error text ("a number") when it does not parse.
    std::function<bool(const std::string&)> set;
    std::string expects;  // what a valid value looks like, for the error message
  };
  void Add(const std::string& name, Flag flag);
  std::string ClosestFlag(const std::string& name) const;

  std::string command_;
  std::string summary_;
  std::string epilog_;
  std::map<std::string, Flag> flags_;
  std::map<std::string, bool> set_flags_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

// The candidate closest to `name` (a mistyped command, subcommand or flag) when it is close
// enough to be a likely typo (edit distance under 3, or `name` is a prefix of exactly one
// candidate); "" otherwise. For "did you mean ...?" messages.
std::string ClosestName(const std::string& name, const std::vector<std::string>& candidates);

// Parses a byte count with an optional unit (B, K/KB/KiB, M..., G..., T...). Returns -1 if invalid.
int64_t ParseByteCount(const std::string& text);

}  // namespace troupe
