// The stacks of exceptions thrown under a ThrowStackCapture (throw_stacks.h): the throw site and
// the functions between it and the capture's caller, innermost first (Bazel's fastbuild strips
// debug info: the binary and offset stand for file:line here; throw_stacks_debug_test.sh checks
// file:line with a g++ -g build); nothing outside a capture; the thrown object picks its stack.
#include "src/api/throw_stacks.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

using troupe::internal::StackOfThrow;
using troupe::internal::ThrowStackCapture;

__attribute__((noinline)) void ParseConfig(int value) {
  if (value < 0) throw std::invalid_argument("negative: " + std::to_string(value));
}

__attribute__((noinline)) int UserTask(int value) {
  ParseConfig(value);
  return value;
}

// What a worker does: run the task under a capture, catch what escapes, ask for its stack.
__attribute__((noinline)) std::string RunTask(int value) {
  ThrowStackCapture capture;
  try {
    UserTask(value);
  } catch (const std::exception& e) {
    return StackOfThrow(dynamic_cast<const void*>(&e));
  }
  return "";
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  return lines;
}

TEST(ThrowStacksTest, TheThrowSiteComesFirst) {
  const std::string stack = RunTask(-1);
  const std::vector<std::string> lines = Lines(stack);
  ASSERT_GE(lines.size(), 3u) << stack;
  EXPECT_EQ(lines[0].rfind("#0 ", 0), 0u) << stack;
  EXPECT_NE(lines[0].find("ParseConfig(int)"), std::string::npos) << stack;
  EXPECT_NE(lines[1].find("UserTask(int)"), std::string::npos) << stack;
  // It ends at the frame that ran the task: nothing of gtest's machinery below it.
  EXPECT_NE(lines.back().find("RunTask(int)"), std::string::npos) << stack;
  EXPECT_EQ(stack.find("testing::"), std::string::npos) << stack;
}

TEST(ThrowStacksTest, ThrowsOutsideACaptureRecordNothing) {
  try {
    ParseConfig(-2);
  } catch (const std::exception& e) {
    EXPECT_EQ(StackOfThrow(dynamic_cast<const void*>(&e)), "");
  }
}

TEST(ThrowStacksTest, TheThrownObjectPicksItsOwnStack) {
  ThrowStackCapture capture;
  std::exception_ptr first;
  try {
    ParseConfig(-3);
  } catch (...) {
    first = std::current_exception();
  }
  try {  // a later throw, caught inside the task
    throw std::runtime_error("later");
  } catch (const std::exception&) {
  }
  try {
    std::rethrow_exception(first);
  } catch (const std::exception& e) {
    const std::string stack = StackOfThrow(dynamic_cast<const void*>(&e));
    EXPECT_NE(stack.find("ParseConfig(int)"), std::string::npos) << stack;
  }
  EXPECT_EQ(StackOfThrow(nullptr).find("ParseConfig"), std::string::npos)
      << "nullptr: the latest throw";
}

TEST(ThrowStacksTest, LibraryThrowsAreRecordedToo) {
  ThrowStackCapture capture;
  try {
    (void)std::stoi("not a number");  // thrown inside libstdc++
  } catch (const std::exception& e) {
    const std::string stack = StackOfThrow(dynamic_cast<const void*>(&e));
    EXPECT_NE(stack.find("stoi"), std::string::npos) << stack;
  }
}

}  // namespace
