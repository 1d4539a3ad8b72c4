// Prints the stack of an exception thrown two calls below a ThrowStackCapture's caller (for
// throw_stacks_debug_test.sh, which checks its lines name this file's lines).
#include <cstdio>
#include <stdexcept>

#include "src/api/throw_stacks.h"

__attribute__((noinline)) void Parse(int value) {
  if (value < 0) throw std::invalid_argument("negative");  // line 9
}

__attribute__((noinline)) void Task(int value) { Parse(value); }  // line 12

__attribute__((noinline)) int RunTask(int value) {
  troupe::internal::ThrowStackCapture capture;
  try {
    Task(value);  // line 17
  } catch (const std::exception& e) {
    std::fputs(troupe::internal::StackOfThrow(dynamic_cast<const void*>(&e)).c_str(), stdout);
    return 0;
  }
  return 1;
}

int main() { return RunTask(-1); }
