// The stack of an exception a task threw, for the caller's TaskError (remote_stack()) and the
// worker's log. Capturing has to happen at the throw: by the time a catch runs, the stack is
// unwound. So this library defines __cxa_throw, the C++ runtime's throw entry point, which the
// process's own throws and those inside libstdc++ resolve to before libstdc++'s (an
// executable's or libtroupe.so's definition comes first in the dynamic lookup order); it records
// the program counters of the throw (one glibc backtrace() call) when the throwing
// thread is running a task, and hands on to libstdc++'s __cxa_throw. Only the stack is
// symbolized, and only for an exception that ends its task: function names from the symbol
// tables, file:line from DWARF debug info where the binary has it (GCC's libbacktrace).
// Thread-safety: each thread records its own throws; StackOfThrow reads the calling thread's.
#pragma once

#include <string>

namespace troupe::internal {

// While one lives on a thread, that thread's throws record their stacks (the last 4 kept; the
// outermost one's end forgets them). Nesting on one thread is fine (the outermost one decides
// where the task's frames end).
class ThrowStackCapture {
 public:
  ThrowStackCapture();
  ~ThrowStackCapture();
  ThrowStackCapture(const ThrowStackCapture&) = delete;
  ThrowStackCapture& operator=(const ThrowStackCapture&) = delete;

 private:
  bool outer_;
};

// The stack recorded when `thrown` (the thrown object: dynamic_cast<const void*>(&e) in a catch
// of a polymorphic type) was thrown on this thread, or with nullptr the last throw recorded on
// it; "" if none, or if no ThrowStackCapture lives on this thread (call it inside one). One frame
// per line, the throw site first, down to the capture's caller, less the frames at the bottom
// that are Troupe's invocation machinery (troupe::internal::, std::function around them, the
// worker's Invoke and ExecuteRegistered); std::string's long demangled name is shortened:
//   #0 Parse(std::string const&) at /src/app.cc:12
//   #1 Task(int) (/usr/local/bin/app+0x1a2b3)      <- no debug info: the binary and offset
std::string StackOfThrow(const void* thrown);

}  // namespace troupe::internal
