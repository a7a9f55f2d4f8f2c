#!/usr/bin/env python3
"""Checks the layering of colo's sources (docs/ARCHITECTURE.md, "Layers").

Reads every #include "..." line of the C, CUDA and header files under the
project's folders and fails (exit 1, one line per bad edge) when:
  - a file includes a header of a higher layer;
  - loadtest/ includes anything outside loadtest/, or anything outside
    tests/ includes loadtest/ (colo-loadtest shares no code with the server);
  - server/ includes a models/ header (it reaches models through the model
    kinds of batching/kind.h);
  - inside models/ or server/, a sub-folder includes one it may not (SUBLAYERS),
    or a file directly in the top folder, or the edge involves a sub-folder
    SUBLAYERS does not place;
  - a private header (runtime's backend_impl.h, cpu_task.h, cuda_impl.h;
    elsewhere any *_impl.h) is included from outside the
    code it is private to.

Layers, bottom to top: runtime, kernels, models, batching, config, server.
models/ and server/ are made of sub-folders, one concern each, with an order
of their own (SUBLAYERS): in models/, file formats at the bottom, tokenizers
on them, the KV and prefix caches beside, sampling and output constraints
(which may use the tokenizers), and the architectures on top; in server/,
the HTTP core, then the tenants, then the front door and the table of
served models (core/), then the API. Files directly in models/ or server/
(server_main.c, admin.c) sit above all of their folder's sub-folders.
tools/ (the programs that are not the server's: colo-mkmodel, its GGUF
writer, the benchmarks) sits above every layer: it may include any of
them, and only tools/ and the tests include it.
kernels/ is part of the backends, as ggml's ops are: kernels/cpu is the CPU
backend's ops and may include runtime/cpu_task.h, kernels/cuda the CUDA
backend's and may include runtime/cuda_impl.h, and both (with the op
dispatch, kernels/ops.c) runtime/backend_impl.h. Tests sit above every
layer; only runtime's and kernels' tests may reach runtime's private
headers, and a folder's other private headers only its tests and the fuzz
targets.

  layer-check.py [--root DIR]   check the tree (default: this script's project)
  layer-check.py --self-test    check that bad edges in a scratch tree are found
"""
import os
import re
import sys
import tempfile

LAYERS = ["runtime", "kernels", "models", "batching", "config", "server"]
RANK = {name: i for i, name in enumerate(LAYERS)}
# Inside a layer: each sub-folder and the sub-folders it may include (its
# own files aside). Files directly in the layer's folder may include every
# sub-folder and are included by none.
SUBLAYERS = {
    "models": {
        "format": (),
        "tokenizer": ("format",),
        "cache": (),
        "sample": ("tokenizer", "format"),
        "arch": ("format", "tokenizer", "cache", "sample"),
    },
    "server": {
        "http": (),
        "tenants": ("http",),
        "core": ("http", "tenants"),
        "api": ("http", "tenants", "core"),
    },
}
FOLDERS = LAYERS + ["tools", "loadtest", "tests"]
SUFFIXES = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

# Runtime's private headers and the files allowed to include them (prefixes).
PRIVATE = {
    "runtime/backend_impl.h": ("runtime/", "kernels/ops.c", "kernels/cpu/", "kernels/cuda/",
                               "tests/runtime/", "tests/kernels/"),
    "runtime/cpu_task.h": ("runtime/", "kernels/cpu/", "tests/runtime/", "tests/kernels/"),
    "runtime/cuda_impl.h": ("runtime/", "kernels/cuda/", "tests/runtime/", "tests/kernels/"),
    # colo-mkmodel writes by the architecture table the loader reads by
    "models/arch/llama_impl.h": ("models/arch/", "tests/models/", "tests/fuzz/", "tools/mkmodel.c"),
}


def folder(path):
    return path.split("/", 1)[0]


def subfolder(path):
    """The sub-folder of path inside its top-level folder; "" for a file
    directly in the top-level folder."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else ""


def bad_sub_edge(src, dst):
    """Why src -> dst, both in one layer with SUBLAYERS, breaks its order,
    or None."""
    top = folder(src)
    order = SUBLAYERS[top]
    ss, sd = subfolder(src), subfolder(dst)
    for sub in (ss, sd):
        if sub and sub not in order:
            return "%s/%s/ has no place in the order of %s/'s sub-folders (SUBLAYERS)" % (top, sub, top)
    if ss == sd or ss == "":
        return None
    if sd == "":
        return "%s/%s/ includes a file of %s/'s top, which sits above its sub-folders" % (top, ss, top)
    if sd not in order[ss]:
        if not order[ss]:
            return "%s/%s/ includes no other sub-folder of %s/" % (top, ss, top)
        return "%s/%s/ may include, of %s/, only %s" % (top, ss, top, ", ".join(s + "/" for s in order[ss]))
    return None


def resolve(root, src, name):
    """The project path an include names: relative to the including file's
    folder first (as the compiler does for "..."), then to the root; None
    for a header from outside the project."""
    local = os.path.normpath(os.path.join(os.path.dirname(src), name))
    if os.path.isfile(os.path.join(root, local)):
        return local
    if os.path.isfile(os.path.join(root, name)):
        return os.path.normpath(name)
    return None


def private_to(header):
    """The prefixes of the files allowed to include header, or None when it
    is public."""
    if header in PRIVATE:
        return PRIVATE[header]
    base = os.path.basename(header)
    if re.search(r"_impl\.(h|cuh)$", base):
        d = os.path.dirname(header) + "/"
        return (d, "tests/" + folder(header) + "/", "tests/fuzz/")
    return None


def bad_edge(src, dst):
    """Why the edge src -> dst breaks the layering, or None."""
    fs, fd = folder(src), folder(dst)
    allowed = private_to(dst)
    if allowed is not None and not src.startswith(allowed):
        return "%s is private to %s" % (dst, ", ".join(allowed))
    if fs == "tests":
        if src.startswith("tests/loadtest/") and fd not in ("loadtest", "tests"):
            return "loadtest's tests include only loadtest/ and tests/"
        return None
    if fs == "loadtest" or fd == "loadtest":
        return None if fs == fd else "loadtest/ shares no code with the other folders"
    if fd == "tests":
        return "only tests include tests/"
    if fd == "tools" and fs != "tools":
        return "only tools/ and tests include tools/ (the programs that are not the server's)"
    if fs == "tools":
        return None
    if fs == "server" and fd == "models":
        return "server/ reaches models only through batching's model kinds"
    if fd in RANK and fs in RANK and RANK[fd] > RANK[fs]:
        return "%s runs up from %s (layer %d) to %s (layer %d)" % (dst, fs, RANK[fs], fd, RANK[fd])
    if fs == fd and fs in SUBLAYERS:
        return bad_sub_edge(src, dst)
    return None


def sources(root):
    for top in FOLDERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def check(root):
    """Lines describing every bad edge under root; [] when the tree is clean."""
    bad = []
    n_files = 0
    for src in sources(root):
        n_files += 1
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                dst = resolve(root, src, m.group(1))
                if dst is None:
                    continue
                why = bad_edge(src, dst)
                if why:
                    bad.append("%s:%d: includes %s: %s" % (src, lineno, m.group(1), why))
    if n_files == 0:
        bad.append("%s: no sources found" % root)
    return bad


def self_test():
    """A clean scratch tree passes; each kind of bad edge added to it fails."""
    clean = {
        "runtime/backend.h": "",
        "runtime/backend_impl.h": '#include "runtime/backend.h"\n',
        "runtime/cpu_task.h": "",
        "runtime/cuda_impl.h": '#include "runtime/backend_impl.h"\n',
        "kernels/ops.h": '#include "runtime/backend.h"\n',
        "kernels/ops.c": '#include "runtime/backend_impl.h"\n',
        "kernels/cpu/k.c": '#include "runtime/cpu_task.h"\n',
        "kernels/cuda/k.cu": '#include "runtime/cuda_impl.h"\n',
        "models/m.h": '#include "kernels/ops.h"\n',
        "models/m_impl.h": '#include "models/m.h"\n',
        "models/m.c": '#include "m_impl.h"\n',
        "batching/b.h": '#include "models/m.h"\n',
        "config/c.h": '#include "batching/b.h"\n',
        "server/s.c": '#include "config/c.h"\n#include "batching/b.h"\n',
        "loadtest/l.h": "",
        "loadtest/l.c": '#include "loadtest/l.h"\n',
        "tests/t.h": "",
        "tests/runtime/test_r.c": '#include "runtime/cpu_task.h"\n#include "tests/t.h"\n',
        "tests/models/test_m.c": '#include "models/m.c"\n#include "models/m_impl.h"\n',
        "tools/w.h": '#include "models/m.h"\n',
        "tools/w.c": '#include "tools/w.h"\n#include "server/s.c"\n',
        "tests/models/test_w.c": '#include "tools/w.h"\n',
        # the sub-folders of models/ and server/, each including what it may
        "models/format/f.h": "",
        "models/tokenizer/t.h": '#include "models/format/f.h"\n',
        "models/tokenizer/t_impl.h": '#include "models/tokenizer/t.h"\n',
        "models/tokenizer/t.c": '#include "models/tokenizer/t_impl.h"\n',
        "models/cache/k.h": "",
        "models/sample/p.h": '#include "models/tokenizer/t.h"\n#include "models/format/f.h"\n',
        "models/arch/a.h": ('#include "models/format/f.h"\n#include "models/tokenizer/t.h"\n'
                            '#include "models/cache/k.h"\n#include "models/sample/p.h"\n'),
        "models/arch/a_impl.h": '#include "models/arch/a.h"\n',
        "models/arch/a.c": '#include "models/arch/a_impl.h"\n',
        "models/top.c": '#include "models/arch/a.h"\n#include "models/cache/k.h"\n',
        "tests/models/test_t.c": '#include "models/tokenizer/t_impl.h"\n#include "models/arch/a_impl.h"\n',
        "server/http/h.h": "",
        "server/http/h_impl.h": '#include "server/http/h.h"\n',
        "server/http/h.c": '#include "server/http/h_impl.h"\n',
        "server/tenants/t.h": '#include "server/http/h.h"\n',
        "server/core/c.h": '#include "server/http/h.h"\n#include "server/tenants/t.h"\n',
        "server/api/a.h": '#include "server/core/c.h"\n',
        "server/api/a_impl.h": '#include "server/api/a.h"\n#include "server/tenants/t.h"\n#include "server/http/h.h"\n',
        "server/main.h": "",
        "server/main.c": '#include "server/main.h"\n#include "server/api/a.h"\n#include "server/core/c.h"\n',
        "tests/server/test_a.c": '#include "server/api/a_impl.h"\n',
        "tests/fuzz/fuzz_h.c": '#include "server/http/h_impl.h"\n',
    }
    bad_edges = [
        ("runtime/r.c", '#include "kernels/ops.h"\n'),
        ("kernels/k.c", '#include "models/m.h"\n'),
        ("models/x.c", '#include "batching/b.h"\n'),
        ("batching/x.c", '#include "config/c.h"\n'),
        ("config/x.c", '#include "server/s.c"\n'),
        ("models/y.c", '#include "runtime/backend_impl.h"\n'),
        ("kernels/bench.c", '#include "runtime/backend_impl.h"\n'),
        ("kernels/cpu/x.c", '#include "runtime/cuda_impl.h"\n'),
        ("kernels/cuda/x.cu", '#include "runtime/cpu_task.h"\n'),
        ("batching/y.c", '#include "models/m_impl.h"\n'),
        ("server/x.c", '#include "models/m.h"\n'),
        ("loadtest/x.c", '#include "runtime/backend.h"\n'),
        ("server/y.c", '#include "loadtest/l.h"\n'),
        ("tests/models/test_x.c", '#include "runtime/cpu_task.h"\n'),
        ("models/z.c", '  #  include "batching/b.h" /* spaced */\n'),
        ("models/w.c", '#include "tools/w.h"\n'),
        ("tools/x.c", '#include "models/m_impl.h"\n'),
        # between the sub-folders of models/ and of server/
        ("models/tokenizer/x.c", '#include "models/arch/a.h"\n'),
        ("models/tokenizer/y.c", '#include "models/sample/p.h"\n'),
        ("models/format/x.c", '#include "models/tokenizer/t.h"\n'),
        ("models/cache/x.c", '#include "models/arch/a.h"\n'),
        ("models/cache/y.c", '#include "models/top.c"\n'),
        ("models/sample/x.c", '#include "models/arch/a.h"\n'),
        ("models/sample/y.c", '#include "models/cache/k.h"\n'),
        ("models/sample/z.c", '#include "models/tokenizer/t_impl.h"\n'),
        ("models/arch/x.c", '#include "models/m.h"\n'),
        ("models/misc/x.c", '#include "models/format/f.h"\n'),
        ("server/http/x.c", '#include "server/tenants/t.h"\n'),
        ("server/tenants/x.c", '#include "server/api/a.h"\n'),
        ("server/tenants/y.c", '#include "server/core/c.h"\n'),
        ("server/core/x.c", '#include "server/api/a.h"\n'),
        ("server/api/x.c", '#include "server/main.h"\n'),
        ("server/x.c", '#include "server/api/a_impl.h"\n'),
        ("server/core/y.c", '#include "server/http/h_impl.h"\n'),
        ("batching/z.c", '#include "models/arch/a_impl.h"\n'),
    ]

    def write(root, files):
        for path, text in files.items():
            full = os.path.join(root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as fh:
                fh.write(text)

    failures = []
    with tempfile.TemporaryDirectory() as root:
        write(root, clean)
        got = check(root)
        if got:
            failures.append("clean tree reported: %s" % got)
    for path, text in bad_edges:
        with tempfile.TemporaryDirectory() as root:
            write(root, clean)
            write(root, {path: text})
            got = check(root)
            if len(got) != 1 or not got[0].startswith(path + ":1:"):
                failures.append("%s with %s: reported %s" % (path, text.strip(), got))
    for f in failures:
        print("layer-check self-test: " + f, file=sys.stderr)
    return 1 if failures else 0


def main(argv):
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = argv[1:]
    if args == ["--self-test"]:
        return self_test()
    if len(args) == 2 and args[0] == "--root":
        root = args[1]
    elif args:
        print(__doc__, file=sys.stderr)
        return 2
    bad = check(root)
    for line in bad:
        print(line, file=sys.stderr)
    if bad:
        print("layer-check: %d include(s) break the layering (docs/ARCHITECTURE.md, Layers)" % len(bad),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
