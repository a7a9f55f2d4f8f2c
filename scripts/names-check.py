#!/usr/bin/env python3
"""Fails when one list of names is written down twice.

A list of names (priorities, scheduling policies, chat templates, kinds...)
has one home, the table that owns it; everything else asks that table. This
reads every brace-enclosed list of three or more string literals (an
initializer such as {"low", "normal", "high", NULL}) in colo's C sources and
headers outside tests/, and fails (exit 1, one line per copy) when the same
set of names is written in two places.

  names-check.py [--root DIR]   check the tree (default: this script's project)
  names-check.py --self-test    check that a copied list is found
"""
import argparse
import os
import pathlib
import re
import sys
import tempfile

FOLDERS = ["runtime", "kernels", "models", "config", "batching", "server", "loadtest", "tools"]
SUFFIXES = (".c", ".h", ".cu", ".cuh")
# {"a", "b", "c" [, NULL]}: string literals separated by commas, nothing else
LIST = re.compile(r'\{\s*("(?:[^"\\]|\\.)*"(?:\s*,\s*"(?:[^"\\]|\\.)*")+)\s*(?:,\s*NULL\s*)?,?\s*\}')
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def lists(path):
    """(line, names) of each list of three or more names in one file."""
    with open(path, errors="replace") as f:
        text = f.read()
    for m in LIST.finditer(text):
        names = STRING.findall(m.group(1))
        if len(names) >= 3:
            yield text.count("\n", 0, m.start()) + 1, tuple(sorted(names))


def sources(root):
    """Every C and CUDA source and header of the checked folders, in order."""
    for folder in FOLDERS:
        base = pathlib.Path(root, folder)
        yield from sorted(p for p in base.rglob("*") if p.suffix in SUFFIXES and p.is_file())


def check(root):
    seen = {}
    for path in sources(root):
        for line, names in lists(path):
            seen.setdefault(names, []).append("%s:%d" % (path.relative_to(root).as_posix(), line))
    return ["%s: the names %s are listed again at %s (one table, asked by the rest)" %
            (places[0], ", ".join(names), ", ".join(places[1:]))
            for names, places in sorted(seen.items()) if len(places) > 1]


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "config"))
        os.makedirs(os.path.join(d, "server"))
        with open(os.path.join(d, "config", "a.c"), "w") as f:
            f.write('static const char *const prio[] = {"low", "normal",\n    "high", NULL};\n')
            f.write('static const char *const modes[] = {"serve", "reject", NULL};\n')
        with open(os.path.join(d, "server", "b.c"), "w") as f:
            f.write('static const char *x = "low";\n\nstatic const char *p[] = {"high", "low", "normal"};\n')
        bad = check(d)
        ok = len(bad) == 1 and bad[0].startswith("config/a.c:1:") and "server/b.c:3" in bad[0]
        print("self-test: %s" % ("ok" if ok else "FAILED: %r" % bad))
        return 0 if ok else 1


def main(argv):
    ap = argparse.ArgumentParser(description="Fails when one list of names is written down twice.")
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parent.parent))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv[1:])
    if args.self_test:
        return self_test()
    bad = check(args.root)
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
