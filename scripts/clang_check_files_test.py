#!/usr/bin/env python3
"""scripts/clang_check_files.py on a small git repository made here: which sources the clang
thread-safety check compiles, and which it only preprocesses."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clang_check_files  # noqa: E402

FILES = {
    # Annotated through two project headers, one named below an include directory.
    "src/a/uses_cache.cc": '#include "src/a/facade.h"\nint F() { return 1; }\n',
    "src/a/facade.h": '#pragma once\n#include "troupe/cache.h"\n',
    "src/api/include/troupe/cache.h":
        '#pragma once\n#include "absl/synchronization/mutex.h"\n'
        'struct Cache { absl::Mutex mu; int n ABSL_GUARDED_BY(mu); };\n',
    # Uses an absl::Mutex of its own: Lock/Unlock are annotated in Abseil.
    "src/b/local_mutex.cc": "void G() { static absl::Mutex mu; mu.Lock(); }\n",
    # Nothing annotated anywhere in its includes (a cycle among them must not hang the walk).
    "src/c/plain.cc": '#include "src/c/x.h"\n#include <vector>\n',
    "src/c/x.h": '#pragma once\n#include "src/c/y.h"\n',
    "src/c/y.h": '#pragma once\n#include "src/c/x.h"\n// no locks here\n',
    # A header with annotations is never listed itself: the sources that include it are.
    "tests/plain_test.cc": '#include "gtest/gtest.h"\n',
    "tests/locking_test.cc": '#include "src/api/include/troupe/cache.h"\n',
}


class CheckedSourcesTest(unittest.TestCase):
    def test_lists_sources_that_see_an_annotation_or_a_mutex(self):
        with tempfile.TemporaryDirectory() as repo:
            for path, text in FILES.items():
                os.makedirs(os.path.dirname(os.path.join(repo, path)), exist_ok=True)
                with open(os.path.join(repo, path), "w") as f:
                    f.write(text)
            subprocess.run(["git", "init", "-q", repo], check=True)
            subprocess.run(["git", "-C", repo, "add", "."], check=True)
            self.assertEqual(clang_check_files.checked_sources(repo),
                             ["src/a/uses_cache.cc", "src/b/local_mutex.cc",
                              "tests/locking_test.cc"])

    def test_this_repository_lists_the_known_lock_users(self):
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if not os.path.isdir(os.path.join(repo, ".git")):
            self.skipTest("not run from a git checkout (the runfiles tree has no .git)")
        listed = clang_check_files.checked_sources(repo)
        for known in ("src/gcs/actor_manager.cc", "tests/tasks_test.cc"):
            self.assertIn(known, listed)


if __name__ == "__main__":
    unittest.main()
