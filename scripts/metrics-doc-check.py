#!/usr/bin/env python3
"""Fails when /metrics and docs/OBSERVABILITY.md disagree on the families.

Every metric family the server registers (a string literal "colo_..." in
a .c file under server/, where the families are named) must have a row in one of
docs/OBSERVABILITY.md's tables (a line starting "| `colo_..."), and every
family a row names must be registered: a new metric without its row, or a
row left behind by a renamed one, fails.

  metrics-doc-check.py [--root DIR]   check the tree
  metrics-doc-check.py --self-test    check that both kinds of drift are found
"""
import glob
import os
import re
import sys
import tempfile

LITERAL = re.compile(r'"(colo_[a-z0-9_]+)"')
ROW = re.compile(r"^\|\s*((?:`colo_[a-z0-9_]+`(?:,\s*)?)+)")


def registered(root):
    names = set()
    for path in glob.glob(os.path.join(root, "server", "**", "*.c"), recursive=True):
        with open(path, errors="replace") as f:
            names.update(LITERAL.findall(f.read()))
    return names


def documented(root):
    names = set()
    with open(os.path.join(root, "docs", "OBSERVABILITY.md"), errors="replace") as f:
        for line in f:
            m = ROW.match(line)
            if m:
                names.update(re.findall(r"`(colo_[a-z0-9_]+)`", m.group(1)))
    return names


def check(root):
    code, doc = registered(root), documented(root)
    problems = [f"{n}: registered in server/ but has no row in docs/OBSERVABILITY.md" for n in sorted(code - doc)]
    problems += [f"{n}: a row of docs/OBSERVABILITY.md, but no such metric in server/" for n in sorted(doc - code)]
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "server"))
        os.makedirs(os.path.join(d, "docs"))
        with open(os.path.join(d, "server", "m.c"), "w") as f:
            f.write('m = counter("colo_a_total", "A.");\nn = gauge("colo_b_bytes", "B.");\n')
        with open(os.path.join(d, "docs", "OBSERVABILITY.md"), "w") as f:
            f.write("| metric | type |\n|---|---|\n| `colo_a_total`, `colo_c` | counter |\n")
        got = check(d)
        want = ["colo_b_bytes: registered", "colo_c: a row"]
        if len(got) != 2 or not all(g.startswith(w) for g, w in zip(got, want)):
            print("self-test failed:", got)
            return 1
        with open(os.path.join(d, "docs", "OBSERVABILITY.md"), "a") as f:
            f.write("| `colo_b_bytes` | gauge |\n")
        with open(os.path.join(d, "server", "m.c"), "a") as f:
            f.write('o = gauge("colo_c", "C.");\n')
        if check(d):
            print("self-test failed on an agreeing tree:", check(d))
            return 1
    print("metrics-doc-check: self-test passed")
    return 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    root = sys.argv[sys.argv.index("--root") + 1] if "--root" in sys.argv else \
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems = check(root)
    for p in problems:
        print(p)
    if not problems:
        print(f"metrics-doc-check: {len(registered(root))} families, each with its row")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
