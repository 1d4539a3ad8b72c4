#include "src/raylet/process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace troupe {

absl::StatusOr<int> PosixProcessLauncher::Start(const ProcessSpec& spec) {
  std::vector<std::string> args = spec.argv;
  std::vector<std::string> env = spec.env;
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int log_fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open ", spec.log_path, ": ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Die with the raylet; start a process group so a kill reaches the worker's children too.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    setpgid(0, 0);
    int null_fd = open("/dev/null", O_RDONLY);
    dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (!spec.working_dir.empty() && chdir(spec.working_dir.c_str()) != 0) {
      dprintf(log_fd, "troupe: cannot enter the working directory %s: %s\n",
              spec.working_dir.c_str(), std::strerror(errno));
      _exit(126);
    }
    execve(argv[0], argv.data(), envp.data());
    dprintf(log_fd, "troupe: cannot start worker %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(log_fd);
  return pid;
}

void PosixProcessLauncher::Kill(int pid) {
  if (pid > 0) kill(-pid, SIGKILL);
}

void PosixProcessLauncher::Terminate(int pid) {
  if (pid > 0) kill(-pid, SIGTERM);
}

std::optional<std::string> PosixProcessLauncher::CheckExited(int pid) {
  int wstatus = 0;
  pid_t result = waitpid(pid, &wstatus, WNOHANG);
  if (result < 0 && errno == ECHILD) return "exited";
  if (result != pid) return std::nullopt;
  if (WIFEXITED(wstatus)) return absl::StrCat("exited with code ", WEXITSTATUS(wstatus));
  return absl::StrCat("was killed by signal ", WTERMSIG(wstatus));
}

bool PosixProcessLauncher::Exists(int pid) { return kill(pid, 0) == 0; }

void PosixProcessLauncher::KillAndWait(int pid) {
  kill(-pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace troupe
