// Linked into the programs the GPU check builds on the GPU machine (gpu/CMakeLists.txt): a
// crash (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) prints the crashing thread's stack to stderr
// before the process dies as it would have, so that one run on a lent machine is enough to see
// where. Symbols come from the dynamic symbol tables (libtroupe_gpu.so exports all of its own).
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

namespace {

// Async-signal-safe enough for a dying process: write(2) and backtrace_symbols_fd only.
void Say(const char* text) {
  if (write(STDERR_FILENO, text, std::strlen(text)) < 0) return;  // nothing more to do
}

void PrintStackAndDie(int signal_number) {
  Say("\n*** crash: ");
  Say(strsignal(signal_number));
  Say(", stack:\n");
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  raise(signal_number);  // SA_RESETHAND restored the default action: die as before
}

const bool installed = [] {
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  struct sigaction action {};
  action.sa_handler = PrintStackAndDie;
  action.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int signal_number : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) {
    sigaction(signal_number, &action, nullptr);
  }
  return true;
}();

}  // namespace
