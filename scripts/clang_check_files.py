#!/usr/bin/env python3
"""Lists the C++ sources that clang's thread-safety analysis can say something about, one
repository-relative path per line: scripts/test.sh's clang check compiles only these (the
compiler, scripts/clang_syntax_only.sh, passes over the rest).

The analysis reports only on code that touches something annotated: a member ABSL_GUARDED_BY a
mutex, a function with ABSL_EXCLUSIVE_LOCKS_REQUIRED (or another lock annotation), or an
absl::Mutex, whose Lock/Unlock are annotated. A translation unit in which none of these is visible
cannot draw a warning. So a .cc is listed when it, or a project header it includes (directly or
through other project headers, followed by the same include paths the build uses), mentions a
lock annotation or absl::Mutex. Generated sources (protobuf) are not in git and never listed.

scripts/test.sh writes the list to a fixed path beside the clang output base, so that the
compile actions' keys stay the same from run to run. A file's place on the list changes only with
its inputs (its own text or a header it includes), which re-runs its action anyway; a change to
the pattern below does not re-run cached actions until their inputs change.

  python3 scripts/clang_check_files.py [REPO]      # REPO defaults to the current directory
"""
import os
import re
import subprocess
import sys

# What makes a translation unit interesting to the analysis (absl/base/thread_annotations.h's
# macros, and absl::Mutex, whose own methods carry them).
ANNOTATED = re.compile(
    r"ABSL_[A-Z_]*(GUARDED_BY|LOCKS_REQUIRED|LOCKS_EXCLUDED|LOCK_FUNCTION|TRYLOCK_FUNCTION|"
    r"LOCKABLE|ACQUIRED_(AFTER|BEFORE)|LOCK_RETURNED|THREAD_SAFETY_ANALYSIS|ASSERT_[A-Z_]*LOCK)"
    r"|absl::(Reader|Writer)?Mutex|absl/synchronization/mutex\.h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# The include directories of the build besides the repository root (cc_library `includes`).
INCLUDE_DIRS = ("src/api/include/", "src/collective/include/", "src/train/include/")


def checked_sources(repo):
    files = subprocess.check_output(["git", "-C", repo, "ls-files"], text=True).split()
    sources = [f for f in files if f.endswith((".cc", ".h"))]
    text = {}
    for path in sources:
        with open(os.path.join(repo, path), errors="replace") as f:
            text[path] = f.read()
    # How an #include "..." names each file: by its repository path, or below an include dir.
    by_include = {path: path for path in sources}
    for path in sources:
        for prefix in INCLUDE_DIRS:
            if path.startswith(prefix):
                by_include[path[len(prefix):]] = path
    def annotated(source):  # breadth-first over the project headers it includes
        seen, todo = {source}, [source]
        while todo:
            path = todo.pop()
            if ANNOTATED.search(text[path]):
                return True
            for name in INCLUDE.findall(text[path]):
                header = by_include.get(name)
                if header is not None and header not in seen:
                    seen.add(header)
                    todo.append(header)
        return False

    return sorted(path for path in sources if path.endswith(".cc") and annotated(path))


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else "."
    for path in checked_sources(repo):
        print(path)


if __name__ == "__main__":
    main()
