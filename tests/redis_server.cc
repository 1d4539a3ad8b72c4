#include "tests/redis_server.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/free_port.h"

namespace troupe::testing {
namespace {

void Flatten(const redisReply& reply, std::vector<std::string>* out) {
  switch (reply.type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      out->emplace_back(reply.str, reply.len);
      break;
    case REDIS_REPLY_INTEGER:
      out->push_back(std::to_string(reply.integer));
      break;
    case REDIS_REPLY_ARRAY:
      for (size_t i = 0; i < reply.elements; ++i) Flatten(*reply.element[i], out);
      break;
    default:
      break;
  }
}

}  // namespace

bool RedisServer::Available(const std::string& binary) { return access(binary.c_str(), X_OK) == 0; }

RedisServer::RedisServer(Options options, int port, std::string dir)
    : options_(std::move(options)), port_(port), dir_(std::move(dir)) {}

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(Options options) {
  if (!Available(options.binary)) {
    return absl::NotFoundError(absl::StrCat(options.binary, " is missing; install redis-server"));
  }
  const char* tmp = getenv("TEST_TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/redis-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", templ, ": ", strerror(errno)));
  }
  absl::Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {  // another process may take the port first
    absl::StatusOr<int> port = FreeLoopbackPort();
    if (!port.ok()) return port.status();
    std::unique_ptr<RedisServer> server(new RedisServer(options, *port, templ));
    {
      const std::string config = absl::StrCat(templ, "/redis.conf");
      const int fd = open(config.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd < 0) return absl::InternalError(absl::StrCat("open ", config, ": ", strerror(errno)));
      std::string text = absl::StrCat("port ", *port, "\nbind 127.0.0.1\ndir ", templ,
                                      "\nsave \"\"\nappendonly yes\nappendfsync everysec\n",
                                      "daemonize no\nlogfile ", templ, "/redis.log\n");
      if (!options.password.empty()) absl::StrAppend(&text, "requirepass ", options.password, "\n");
      const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
      close(fd);
      if (!written) return absl::InternalError(absl::StrCat("writing ", config));
    }
    last = server->Launch();
    if (last.ok()) return server;
    // ~RedisServer removes the dir; make a fresh one for the next attempt.
    templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/redis-XXXXXX");
    if (mkdtemp(templ.data()) == nullptr) break;
  }
  return last;
}

RedisServer::~RedisServer() {
  if (pid_ > 0) Signal(SIGKILL).IgnoreError();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string RedisServer::address() const { return absl::StrCat("127.0.0.1:", port_); }

absl::Status RedisServer::Launch() {
  const std::string binary = options_.binary;
  const std::string config = absl::StrCat(dir_, "/redis.conf");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      dup2(null_fd, 0);
      dup2(null_fd, 1);
      dup2(null_fd, 2);
    }
    execl(binary.c_str(), binary.c_str(), config.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  pid_ = pid;
  absl::Status ready = WaitReady();
  if (!ready.ok() && pid_ > 0) Signal(SIGKILL).IgnoreError();
  return ready;
}

absl::Status RedisServer::WaitReady() {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::string last = "not tried";
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat("redis-server on port ", port_,
                                              " exited at start; its log ends:\n", LogTail()));
    }
    absl::StatusOr<std::vector<std::string>> pong = Command({"PING"});
    if (pong.ok() && pong->size() == 1 && (*pong)[0] == "PONG") return absl::OkStatus();
    last = pong.ok() ? "no PONG" : std::string(pong.status().message());
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("redis-server on port ", port_,
                                                  " did not answer PING within 10s (", last,
                                                  "); its log ends:\n", LogTail()));
}

absl::Status RedisServer::Signal(int signal) {
  if (pid_ <= 0) return absl::FailedPreconditionError("redis-server is not running");
  kill(pid_, signal);
  if (signal != SIGKILL) kill(pid_, SIGCONT);  // a paused server handles SIGTERM once resumed
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return absl::OkStatus();
}

absl::Status RedisServer::Stop() { return Signal(SIGTERM); }
absl::Status RedisServer::Kill() { return Signal(SIGKILL); }

absl::Status RedisServer::Pause() {
  if (pid_ <= 0) return absl::FailedPreconditionError("redis-server is not running");
  kill(pid_, SIGSTOP);
  return absl::OkStatus();
}

absl::Status RedisServer::Resume() {
  if (pid_ <= 0) return absl::FailedPreconditionError("redis-server is not running");
  kill(pid_, SIGCONT);
  return absl::OkStatus();
}

absl::Status RedisServer::Restart() {
  if (pid_ > 0) {
    absl::Status stopped = Stop();
    if (!stopped.ok()) return stopped;
  }
  return Launch();
}

absl::StatusOr<std::vector<std::string>> RedisServer::Command(
    const std::vector<std::string>& argv) {
  redisContext* context = redisConnectWithTimeout(
      "127.0.0.1", port_, absl::ToTimeval(absl::Milliseconds(500)));
  if (context == nullptr || context->err != 0) {
    const std::string error = context != nullptr ? context->errstr : "out of memory";
    redisFree(context);
    return absl::UnavailableError(absl::StrCat("connecting to ", address(), ": ", error));
  }
  redisSetTimeout(context, absl::ToTimeval(absl::Seconds(5)));
  auto run = [&](const std::vector<std::string>& args) -> absl::StatusOr<std::vector<std::string>> {
    std::vector<const char*> pointers;
    std::vector<size_t> lengths;
    for (const std::string& arg : args) {
      pointers.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    auto* reply = static_cast<redisReply*>(redisCommandArgv(
        context, static_cast<int>(args.size()), pointers.data(), lengths.data()));
    if (reply == nullptr) {
      return absl::UnavailableError(absl::StrCat(args[0], " to ", address(), ": ",
                                                 context->errstr));
    }
    std::vector<std::string> out;
    absl::Status status;
    if (reply->type == REDIS_REPLY_ERROR) {
      status = absl::UnknownError(std::string(reply->str, reply->len));
    } else {
      Flatten(*reply, &out);
    }
    freeReplyObject(reply);
    if (!status.ok()) return status;
    return out;
  };
  absl::StatusOr<std::vector<std::string>> result = std::vector<std::string>();
  if (!options_.password.empty()) result = run({"AUTH", options_.password});
  if (result.ok()) result = run(argv);
  redisFree(context);
  return result;
}

absl::Status RedisServer::AddAclUser(const std::string& user, const std::string& password) {
  return Command({"ACL", "SETUSER", user, "on", ">" + password, "~*", "+@all"}).status();
}

std::string RedisServer::LogTail() const {
  std::ifstream log(absl::StrCat(dir_, "/redis.log"));
  std::stringstream text;
  text << log.rdbuf();
  const std::string all = text.str();
  return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
}

}  // namespace troupe::testing
