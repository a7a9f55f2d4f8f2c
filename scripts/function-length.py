#!/usr/bin/env python3
"""Fails when a function of colo's sources is longer than a limit.

A function is what the style (../shared/STYLE.md) writes as a signature
followed by a line holding only "{" and ending at the next line holding
only "}"; its length counts the signature's first line to that "}". The
folders checked are the project's C and CUDA sources and headers (.c, .h,
.cu, .cuh: an inline function or a template in a header is code like any
other; tests and fuzz targets are left out: a test is a list of cases).

  function-length.py [--root DIR] [--max N]   check the tree (default 120 lines)
  function-length.py --self-test              check that a long function is found
"""
import os
import re
import sys
import tempfile

FOLDERS = ["runtime", "kernels", "models", "config", "batching", "server", "loadtest", "tools"]
NAME = re.compile(r"(\w+)\s*\(")


def functions(path):
    """(name, first line, length) of each function of one file."""
    with open(path, errors="replace") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i] == "{" and i > 0:
            j = i - 1
            while j > 0 and "(" not in lines[j]:
                j -= 1
            m = NAME.search(lines[j])
            k = i + 1
            while k < len(lines) and lines[k] != "}":
                k += 1
            yield (m.group(1) if m else "?", j + 1, k - j + 1)
            i = k
        i += 1


def check(root, limit):
    bad = []
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if not name.endswith((".c", ".cu", ".h", ".cuh")):
                    continue
                path = os.path.join(dirpath, name)
                for fn, line, n in functions(path):
                    if n > limit:
                        bad.append("%s:%d: %s is %d lines (at most %d)" % (os.path.relpath(path, root), line, fn, n,
                                                                           limit))
    return bad


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "server"))
        with open(os.path.join(d, "server", "a.c"), "w") as f:
            f.write("static int short_one(void)\n{\n    return 0;\n}\n\n")
            f.write("int long_one(int a,\n             int b)\n{\n" + "    a++;\n" * 20 + "    return a + b;\n}\n")
        with open(os.path.join(d, "server", "b.cuh"), "w") as f:
            f.write("template <int T> __device__ void long_two(float *v)\n{\n" + "    v[0]++;\n" * 21 + "}\n")
        bad = check(d, 20)
        ok = (len(bad) == 2 and "long_one is 25 lines" in bad[0] and "a.c:6:" in bad[0] and
              "b.cuh:1: long_two is 24 lines" in bad[1])
        print("self-test: %s" % ("ok" if ok else "FAILED: %r" % bad))
        return 0 if ok else 1


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    limit = 120
    args = iter(argv[1:])
    for a in args:
        if a == "--self-test":
            return self_test()
        if a == "--root":
            root = next(args)
        elif a == "--max":
            limit = int(next(args))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    bad = check(root, limit)
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
