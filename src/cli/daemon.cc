#include "src/cli/daemon.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troupe {

absl::StatusOr<int> SpawnDaemon(const std::vector<std::string>& args, const std::string& log_path) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return absl::InternalError("cannot find this executable (/proc/self/exe)");
  exe[n] = '\0';
  int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open log file ", log_path, ": ", std::strerror(errno)));
  }
  std::vector<char*> argv;
  argv.push_back(exe);
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::ResourceExhaustedError(absl::StrCat("fork failed: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setsid();
    int null_fd = open("/dev/null", O_RDONLY);
    dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(exe, argv.data());
    dprintf(log_fd, "exec %s failed: %s\n", exe, std::strerror(errno));
    _exit(127);
  }
  close(log_fd);
  return pid;
}

absl::Status WaitUntilReady(int pid, const std::string& what, const std::string& log_path,
                            absl::Duration timeout, const std::function<absl::Status()>& ready) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::UnknownError("not checked yet");
  while (true) {
    int wstatus = 0;
    if (waitpid(pid, &wstatus, WNOHANG) == pid) {
      std::string how = WIFEXITED(wstatus) ? absl::StrCat("exited with code ", WEXITSTATUS(wstatus))
                                           : absl::StrCat("died of signal ", WTERMSIG(wstatus));
      return absl::FailedPreconditionError(absl::StrCat(what, " ", how,
                                                        " while starting. Last lines of ", log_path,
                                                        ":\n", TailFile(log_path, 8)));
    }
    last = ready();
    if (last.ok()) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, " did not become ready within ", absl::FormatDuration(timeout), " (",
          last.message(), "). Last lines of ", log_path, ":\n", TailFile(log_path, 8)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

absl::Status TcpConnectable(const std::string& address) {
  const size_t colon = address.rfind(':');
  const std::string host = address.substr(0, colon);
  const std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
  addrinfo hints{}, *result = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &result) != 0 || result == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", address));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool connected = fd >= 0 && connect(fd, result->ai_addr, result->ai_addrlen) == 0;
  std::string error = connected ? "" : std::strerror(errno);
  if (fd >= 0) close(fd);
  freeaddrinfo(result);
  if (!connected) return absl::UnavailableError(absl::StrCat(address, ": ", error));
  return absl::OkStatus();
}

std::string TailFile(const std::string& path, int lines) {
  std::ifstream in(path);
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    tail.push_back("    " + line);
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  return absl::StrJoin(tail, "\n");
}

}  // namespace troupe
