#include "src/api/throw_stacks.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

// GCC's libbacktrace (libgcc-12-dev: libbacktrace.a beside the compiler): the three functions
// used here, declared as its backtrace.h declares them (that header lies in GCC's own include
// directory, which clang, the thread-safety check's compiler, does not search).
extern "C" {
struct backtrace_state;
typedef void (*backtrace_error_callback)(void* data, const char* msg, int errnum);
typedef int (*backtrace_full_callback)(void* data, uintptr_t pc, const char* filename, int lineno,
                                       const char* function);
typedef void (*backtrace_syminfo_callback)(void* data, uintptr_t pc, const char* symname,
                                           uintptr_t symval, uintptr_t symsize);
backtrace_state* backtrace_create_state(const char* filename, int threaded,
                                        backtrace_error_callback error_callback, void* data);
int backtrace_pcinfo(backtrace_state* state, uintptr_t pc, backtrace_full_callback callback,
                     backtrace_error_callback error_callback, void* data);
int backtrace_syminfo(backtrace_state* state, uintptr_t addr, backtrace_syminfo_callback callback,
                      backtrace_error_callback error_callback, void* data);
}

namespace troupe::internal {
namespace {

constexpr int kMaxFrames = 128;
constexpr int kKept = 4;  // throws remembered per thread (a task that catches its own)

struct Recorded {
  const void* thrown = nullptr;
  int frames = 0;
  void* pcs[kMaxFrames];
};

struct ThreadState {
  int depth = 0;        // ThrowStackCapture nesting
  int base_frames = 0;  // frames below the outer capture's caller: not the task's
  int next = 0;
  Recorded recorded[kKept];
};

thread_local ThreadState state;

}  // namespace

// Called by the __cxa_throw below (not static: its frame is the one skipped).
void RecordThrow(const void* thrown) {
  ThreadState& s = state;
  if (s.depth == 0) return;
  Recorded& r = s.recorded[s.next];
  s.next = (s.next + 1) % kKept;
  r.thrown = thrown;
  r.frames = backtrace(r.pcs, kMaxFrames);
}

ThrowStackCapture::ThrowStackCapture() : outer_(state.depth == 0) {
  if (outer_) {
    void* pcs[kMaxFrames];
    // This constructor, its caller, then the frames below the caller.
    state.base_frames = backtrace(pcs, kMaxFrames) - 2;
    for (Recorded& r : state.recorded) r = Recorded();
  }
  ++state.depth;
}

ThrowStackCapture::~ThrowStackCapture() {
  if (--state.depth == 0) {
    for (Recorded& r : state.recorded) r = Recorded();
  }
}

namespace {

backtrace_state* Symbolizer() {
  static backtrace_state* symbolizer = backtrace_create_state(
      nullptr, /*threaded=*/1, [](void*, const char*, int) {}, nullptr);
  return symbolizer;
}

std::string Demangled(const char* name) {
  if (name == nullptr) return "";
  int status = 0;
  char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && demangled != nullptr ? demangled : name;
  std::free(demangled);
  return out;
}

struct Frame {
  std::string function, file;
  int line = 0;
};

// The function(s) at `pc`: with debug info, one per inlined level (innermost first) with file
// and line; without, the symbol table's name.
std::vector<Frame> Describe(uintptr_t pc) {
  std::vector<Frame> frames;
  backtrace_pcinfo(
      Symbolizer(), pc,
      [](void* data, uintptr_t, const char* file, int line, const char* function) {
        if (file == nullptr && function == nullptr) return 0;
        static_cast<std::vector<Frame>*>(data)->push_back(
            {Demangled(function), file == nullptr ? "" : file, line});
        return 0;
      },
      [](void*, const char*, int) {}, &frames);
  if (frames.empty() || frames[0].function.empty()) {
    std::string symbol;
    backtrace_syminfo(
        Symbolizer(), pc,
        [](void* data, uintptr_t, const char* name, uintptr_t, uintptr_t) {
          *static_cast<std::string*>(data) = Demangled(name);
        },
        [](void*, const char*, int) {}, &symbol);
    if (frames.empty()) frames.push_back({});
    frames[0].function = symbol;
  }
  return frames;
}

// std::string's full name, as demangling spells it, shortened.
std::string Shortened(std::string name) {
  static const std::string kString =
      "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >";
  for (size_t at; (at = name.find(kString)) != std::string::npos;) {
    name.replace(at, kString.size(), "std::string");
  }
  return name;
}

bool IsInvocationFrame(const std::string& function) {
  return function.find("troupe::internal::") != std::string::npos || function == "Invoke" ||
         function == "ExecuteRegistered" || function == "(anonymous namespace)::Invoke" ||
         function == "(anonymous namespace)::ExecuteRegistered";
}

}  // namespace

std::string StackOfThrow(const void* thrown) {
  const ThreadState& s = state;
  if (s.depth == 0) return "";
  const Recorded* found = nullptr;
  for (int i = 1; i <= kKept && found == nullptr; ++i) {  // the latest first
    const Recorded& r = s.recorded[(s.next - i + kKept) % kKept];
    if (r.frames > 0 && (thrown == nullptr || r.thrown == thrown)) found = &r;
  }
  if (found == nullptr) return "";
  // Frame 0 is RecordThrow, 1 __cxa_throw; the last base_frames run the task loop.
  int end = found->frames;
  if (found->frames < kMaxFrames && found->frames - s.base_frames > 2) end -= s.base_frames;
  std::vector<std::pair<std::string, std::string>> frames;  // function, where
  static std::mutex mu;  // libbacktrace's state is shared; one symbolization at a time
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 2; i < end; ++i) {
    // A return address points after the call: the call's line is at pc - 1.
    const uintptr_t pc = reinterpret_cast<uintptr_t>(found->pcs[i]) - 1;
    for (const Frame& frame : Describe(pc)) {
      std::string where;
      if (!frame.file.empty()) {
        where = " at " + frame.file + ":" + std::to_string(frame.line);
      } else {
        Dl_info info;
        if (dladdr(found->pcs[i], &info) != 0 && info.dli_fname != nullptr) {
          char offset[32];
          std::snprintf(offset, sizeof(offset), "+0x%zx",
                        static_cast<size_t>(pc - reinterpret_cast<uintptr_t>(info.dli_fbase)));
          where = std::string(" (") + info.dli_fname + offset + ")";
        }
      }
      frames.emplace_back(Shortened(frame.function.empty() ? "??" : frame.function), where);
    }
  }
  // The frames that called the function for the task (the registry's invokers, std::function,
  // the worker's Invoke): Troupe's, not the user's.
  while (!frames.empty() && IsInvocationFrame(frames.back().first)) frames.pop_back();
  std::string out;
  for (size_t n = 0; n < frames.size(); ++n) {
    out += "#" + std::to_string(n) + " " + frames[n].first + frames[n].second + "\n";
  }
  if (end == kMaxFrames) out += "... (deeper frames not recorded)\n";
  return out;
}

}  // namespace troupe::internal

// The C++ runtime's throw: records the stack (ThrowStackCapture), then libstdc++'s __cxa_throw.
extern "C" {
void __cxa_throw(void* thrown, std::type_info* type, void (*destroy)(void*)) {
  troupe::internal::RecordThrow(thrown);
  using Throw = void (*)(void*, std::type_info*, void (*)(void*));
  static const Throw next = reinterpret_cast<Throw>(dlsym(RTLD_NEXT, "__cxa_throw"));
  next(thrown, type, destroy);
  __builtin_unreachable();
}
}
