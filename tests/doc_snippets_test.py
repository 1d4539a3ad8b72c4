#!/usr/bin/env python3
"""Compiles every C++ snippet in README.md and docs/*.md (g++ -fsyntax-only), so the docs cannot
show code that does not build.

Each ```cpp block is one of (an HTML comment on the line before the block says which, except for
a whole program, which is recognised by its `int main(`):
  program                          compiled alone, exactly as shown (no includes added)
  <!-- snippet: program+context -->  a program that uses placeholders (MakeModel, ...) from the
                                   doc's context header tests/doc_snippets/<doc>_context.h
  <!-- snippet: declarations -->   namespace-scope code, kept for the doc's later body snippets
  <!-- snippet: body -->           statements, compiled inside a function after the doc's context
                                   header and its declarations so far
  <!-- snippet: program+cxx20 -->  a whole program compiled as C++20 (troupe/async.h's
                                   coroutines), exactly as shown
A C++ block with none of these fails the test: say how to compile it.
"""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

BLOCK = re.compile(r"(?:<!-- snippet: ([a-z0-9+]+) -->\n)?```(?:cpp|c\+\+)\n(.*?)```", re.S)


def runfiles_root():
    srcdir, workspace = os.environ.get("TEST_SRCDIR"), os.environ.get("TEST_WORKSPACE")
    if srcdir and workspace:
        return os.path.join(srcdir, workspace)
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_source(root, source, name, workdir, std="c++17"):
    path = os.path.join(workdir, name + ".cc")
    with open(path, "w") as out:
        out.write(source)
    flags = ["-std=" + std, "-fsyntax-only", "-DMSGPACK_NO_BOOST", "-Wno-unused-variable"]
    for include in ("src/api/include", "src/collective/include", "src/train/include",
                    "tests/doc_snippets"):
        flags.append("-I" + os.path.join(root, include))
    if os.path.isdir("/usr/include/torch/csrc/api/include"):
        flags.append("-I/usr/include/torch/csrc/api/include")
    result = subprocess.run(["g++"] + flags + [path], capture_output=True, text=True)
    return result.returncode == 0, result.stderr


def main():
    root = runfiles_root()
    docs = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(root, "docs"))
                                  if f.endswith(".md"))
    workdir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    passed, failed = 0, []
    # Two compilers at a time (each snippet is a g++ of its own, most of it parsing headers).
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    jobs = []
    for doc in docs:
        text = open(os.path.join(root, doc)).read()
        stem = os.path.splitext(os.path.basename(doc))[0].lower()
        context = '#include "%s_context.h"\n' % stem
        declarations = ""
        for index, match in enumerate(BLOCK.finditer(text)):
            kind, code = match.group(1), match.group(2)
            # The block's first code line (1-based): after the fence, and the marker if any.
            line = text.count("\n", 0, match.start()) + (3 if kind else 2)
            where = "%s:%d" % (doc, line)
            if kind is None and re.search(r"\bint main\(", code):
                kind = "program"
            if kind in ("program", "program+cxx20"):
                source = code
            elif kind == "program+context":
                source = context + code
            elif kind == "declarations":
                declarations += "#line %d \"%s\"\n%s\n" % (line, doc, code)
                source = context + declarations
            elif kind == "body":
                source = "%s%s\nvoid Snippet() {\n#line %d \"%s\"\n%s\n}\n" % (
                    context, declarations, line, doc, code)
            else:
                failed.append((where, "a C++ block without a kind: put <!-- snippet: body --> "
                               "(or declarations, program+context) on the line before it"))
                continue
            if kind in ("program", "program+cxx20"):
                source = "#line %d \"%s\"\n%s" % (line, doc, source)
            elif kind == "program+context":
                source = "%s#line %d \"%s\"\n%s" % (context, line, doc, code)
            std = "c++20" if kind.endswith("+cxx20") else "c++17"
            jobs.append((where, kind, pool.submit(compile_source, root, source,
                                                  "%s_%d" % (stem, index), workdir, std)))
    for where, kind, job in jobs:  # in the docs' order
        ok, errors = job.result()
        if ok:
            passed += 1
            print("ok   %s (%s)" % (where, kind))
        else:
            failed.append((where, errors))
    pool.shutdown()
    for where, why in failed:
        print("FAIL %s\n%s" % (where, why))
    print("%d snippets compiled, %d failed" % (passed, len(failed)))
    if passed == 0:
        print("FAIL: no snippet found (are the docs in the runfiles?)")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
