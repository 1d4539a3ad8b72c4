// RedisServer: a real redis-server for tests, on a free loopback port in a private temp dir
// (under $TEST_TMPDIR), with AOF on and RDB snapshots off, so data written before Stop() or Kill()
// is there again after Restart() on the same port and dir. The password, if any, goes into the
// config file in that dir (mode 0600), never onto a command line. The destructor SIGKILLs the
// server and removes its dir.
//
// The server dies with the thread that started (or restarted) it (PR_SET_PDEATHSIG), so a crashed
// test leaves no redis-server behind: start it from the test's main thread.
// Not thread-safe; one test thread drives it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace troupe::testing {

inline constexpr char kRedisServerBinary[] = "/usr/bin/redis-server";

struct RedisServerOptions {
  std::string password;  // "": no requirepass
  std::string binary = kRedisServerBinary;
};

class RedisServer {
 public:
  using Options = RedisServerOptions;

  // Whether the redis-server binary exists (tests GTEST_SKIP without it).
  static bool Available(const std::string& binary = kRedisServerBinary);

  // Starts the server and waits (up to 10 s) until it answers PING.
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(Options options = {});
  ~RedisServer();

  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  std::string address() const;  // "127.0.0.1:<port>"
  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  const std::string& password() const { return options_.password; }
  bool running() const { return pid_ > 0; }

  // SIGTERM and wait: Redis writes its AOF out first.
  absl::Status Stop();
  // SIGKILL and wait: a crash (data already written to the AOF file survives).
  absl::Status Kill();
  // SIGSTOP / SIGCONT: a hung Redis (connections are accepted by the kernel, nothing answers).
  absl::Status Pause();
  absl::Status Resume();
  // Starts it again on the same port and dir, and waits for PING. Running: stops it first.
  absl::Status Restart();

  // Runs one command as the default user (AUTHed with the password). The reply as strings: a
  // string, status or integer is one element, an array its elements (nested arrays flattened),
  // nil none. An error reply is an Unknown status carrying its text.
  absl::StatusOr<std::vector<std::string>> Command(const std::vector<std::string>& argv);
  // ACL SETUSER <user> on ><password> ~* +@all
  absl::Status AddAclUser(const std::string& user, const std::string& password);

 private:
  RedisServer(Options options, int port, std::string dir);
  absl::Status Launch();
  absl::Status WaitReady();
  absl::Status Signal(int signal);
  std::string LogTail() const;

  const Options options_;
  const int port_;
  const std::string dir_;
  pid_t pid_ = -1;
};

}  // namespace troupe::testing
