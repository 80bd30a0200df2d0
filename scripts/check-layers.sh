#!/usr/bin/env bash
# scripts/check-layers.sh: does src/ keep its layers (DESIGN.md section 2) and are its files free of
# call cycles? Two checks, one line per finding, exit status 1 on any finding not in the known lists:
#
#   scripts/check-layers.sh BUILD_DIR        (e.g. build; registered as the ctest test check_layers)
#
# 1. Includes: every `#include "dir/file.h"` of a .c .h .cu .cuh file in src/ points to the same or a
#    lower layer of LAYERS below; a file under src/device/<backend>/ includes no sibling backend's
#    folder (BACKENDS, except the pairs in BACKEND_WRAPS: the guard backend wraps the cpu one).
# 2. Calls: the file-level call graph of src/ from the object files of BUILD_DIR (nm: each object's
#    undefined symbols resolved to the source file that defines them, within its own program or
#    library first); every strongly connected component of more than one source file is a cycle,
#    printed with the symbols that make it.
#
# The known lists hold what today's tree still does wrong, each with its reason; the script prints
# them ("known: ...") so they stay in sight, and notes an entry that no longer occurs, to be removed.
# A file of src/ outside every layer of the table is a finding too: a new folder needs its layer.
set -uo pipefail

# Layers, top to bottom: a file may include its own layer and the layers below it. Each line: a name
# and the path prefixes (relative to the repository root) of its files; the longest prefix wins.
# src/kernels/ holds the kernel table headers (kernels.h, kernel_list.h, kernel_params.h, and
# block_sum.h, the summation order the backends share); the kernels themselves live in their backends'
# folders, src/device/<backend>/. src/prof/ (the trace) sits above comm: fsdp_trace_write gathers the
# ranks' spans with a collective (only fsdp/ and cli/ use it).
LAYERS='
cli      src/cli/
fsdp     src/fsdp/
ckpt     src/ckpt/
optim    src/optim/
nn       src/nn/
data     src/data/
device   src/device/
kernels  src/kernels/
prof     src/prof/
comm     src/comm/
base     src/core/ src/tensor/
'
# The backends (folders under src/device/) and the ones a backend may include besides its own.
BACKENDS='cpu guard cuda'
BACKEND_WRAPS='guard:cpu'

# Known upward includes: "file -> included path   reason". To be removed as they are fixed.
KNOWN_INCLUDES='
'
# Known call cycles: "path globs   reason". A cycle is known when every one of its files matches a
# glob of one entry.
KNOWN_CYCLES='
'

[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$1
[ -d "$BUILD/CMakeFiles" ] || { echo "check-layers.sh: $BUILD: not a CMake build directory (no CMakeFiles/)" >&2; exit 2; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
command -v nm >/dev/null || { echo "check-layers.sh: nm (binutils) not found on the PATH" >&2; exit 2; }

export LAYERS BACKENDS BACKEND_WRAPS KNOWN_INCLUDES KNOWN_CYCLES
exec "$PY" - "$ROOT" "$BUILD" <<'PYTHON'
import fnmatch, os, re, subprocess, sys
from collections import defaultdict

root, build = sys.argv[1], os.path.abspath(sys.argv[2])
env = os.environ

def table(text):  # the non-empty lines of a table, comments dropped
    return [l.split('#')[0].rstrip() for l in text.splitlines() if l.split('#')[0].strip()]

layers = []  # (rank, name, prefix): rank 0 is the bottom
rows = table(env['LAYERS'])
for i, line in enumerate(rows):
    name, *prefixes = line.split()
    for p in prefixes:
        layers.append((len(rows) - 1 - i, name, p))
layers.sort(key=lambda l: -len(l[2]))
backends = env['BACKENDS'].split()
wraps = {tuple(w.split(':')) for w in env['BACKEND_WRAPS'].split()}
known_includes = {}
for line in table(env['KNOWN_INCLUDES']):
    m = re.match(r'(\S+)\s+->\s+(\S+)\s+(.*)', line)
    known_includes[(m.group(1), m.group(2))] = m.group(3)
known_cycles = []
for line in table(env['KNOWN_CYCLES']):
    words = line.split()
    n = next(i for i, w in enumerate(words + ['']) if not w.startswith('src/'))
    known_cycles.append((words[:n], ' '.join(words[n:])))

def layer_of(path):  # (rank, name) of a repository-relative path; None outside the table
    for rank, name, prefix in layers:
        if path.startswith(prefix):
            return rank, name
    return None

def backend_of(path):  # the backend folder a path lies in, or None
    m = re.match(r'src/device/([^/]+)/', path)
    return m.group(1) if m and m.group(1) in backends else None

failed = False
def report(known, line):
    global failed
    if known is None:
        failed = True
        print('VIOLATION: ' + line)
    else:
        print('known: %s   (%s)' % (line, known))

# 1. includes
include_re = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
seen_known = set()
sources = []
for d, _, files in os.walk(os.path.join(root, 'src')):
    sources += [os.path.join(d, f) for f in files if f.endswith(('.c', '.h', '.cu', '.cuh'))]
n_includes = 0
for src in sorted(sources):
    rel = os.path.relpath(src, root)
    if not layer_of(rel):
        report(None, '%s: in no layer of LAYERS (a new folder? give it its layer)' % rel)
    with open(src, encoding='utf-8', errors='replace') as f:
        for lineno, text in enumerate(f, 1):
            m = include_re.match(text)
            if not m:
                continue
            # as the compiler looks: the including file's folder first, then src/ (-I src)
            inc = m.group(1)
            local = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            target = local if os.path.exists(os.path.join(root, local)) else os.path.normpath(os.path.join('src', inc))
            if not os.path.exists(os.path.join(root, target)):
                continue  # a header from outside src/ (a system or toolkit header in quotes)
            n_includes += 1
            here, there = layer_of(rel), layer_of(target)
            where = '%s:%d: #include "%s"' % (rel, lineno, inc)
            key = (rel, inc)
            if here and there and there[0] > here[0]:
                if key in known_includes:
                    seen_known.add(key)
                report(known_includes.get(key), '%s: layer %s includes the higher layer %s' % (where, here[1], there[1]))
            b, c = backend_of(rel), backend_of(target)
            if b and c and b != c and (b, c) not in wraps:
                if key in known_includes:
                    seen_known.add(key)
                report(known_includes.get(key), '%s: backend %s includes its sibling backend %s' % (where, b, c))
for key in sorted(set(known_includes) - seen_known):
    print('note: known include %s -> %s no longer occurs: remove it from KNOWN_INCLUDES' % key)

# 2. calls: objects under BUILD/CMakeFiles/<target>.dir/src/...; one source file may be compiled
# into several targets (the tools share src/cli files): its symbols are the union
defs = defaultdict(lambda: defaultdict(set))  # target -> symbol -> source files defining it
undefs = defaultdict(set)                      # (target, source) -> undefined symbols
cmakefiles = os.path.join(build, 'CMakeFiles')
n_objects = 0
for target_dir in sorted(os.listdir(cmakefiles)):
    if not target_dir.endswith('.dir'):
        continue
    top = os.path.join(cmakefiles, target_dir, 'src')
    for d, _, files in os.walk(top):
        for f in files:
            if not f.endswith('.o'):
                continue
            obj = os.path.join(d, f)
            src = 'src/' + os.path.relpath(obj, top)[:-2]  # src/nn/lora.c from .../src/nn/lora.c.o
            if not os.path.exists(os.path.join(root, src)):
                continue  # left over from a source file since moved or removed
            out = subprocess.run(['nm', '-P', obj], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit('check-layers.sh: nm %s failed: %s' % (obj, out.stderr.strip().splitlines()[-1:]))
            n_objects += 1
            for line in out.stdout.splitlines():
                parts = line.split()
                if len(parts) < 2:
                    continue
                sym, kind = parts[0], parts[1]
                if kind == 'U':
                    undefs[(target_dir, src)].add(sym)
                elif kind in 'TDBRGSCui':  # strong definitions; weak ones (W V w v) are copies
                    defs[target_dir][sym].add(src)
if n_objects == 0:
    sys.exit('check-layers.sh: %s: no object files under CMakeFiles/*.dir/src: build it first' % build)

edges = defaultdict(lambda: defaultdict(set))  # caller source -> callee source -> symbols
library = 'fsdp.dir'
for (target, src), syms in undefs.items():
    for sym in syms:
        callees = defs[target].get(sym) or defs[library].get(sym) or set()
        for callee in callees:
            if callee != src:
                edges[src][callee].add(sym)

def strongly_connected(nodes, edges):  # Tarjan, iterative
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]; counter[0] += 1
        stack.append(start); on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out

def demangled(sym):  # C++ names (the .cu files) as c++filt writes them, without the parameter list
    if not sym.startswith('_Z'):
        return sym
    try:
        out = subprocess.run(['c++filt', sym], capture_output=True, text=True).stdout.strip()
    except OSError:
        return sym
    return out.split('(')[0] or sym

nodes = sorted(set(edges) | {c for e in edges.values() for c in e} | {s for _, s in undefs})
cycles = [c for c in strongly_connected(nodes, edges) if len(c) > 1]
seen_cycles = set()
for comp in sorted(cycles):
    known = None
    for i, (globs, reason) in enumerate(known_cycles):
        if all(any(fnmatch.fnmatch(f, g) for g in globs) for f in comp):
            known = reason; seen_cycles.add(i)
            break
    report(known, 'call cycle of %d files: %s' % (len(comp), ' '.join(comp)))
    members = set(comp)
    for a in comp:
        for b in sorted(edges[a]):
            if b in members:
                syms = sorted(demangled(s) for s in edges[a][b])
                more = ' (+%d more)' % (len(syms) - 8) if len(syms) > 8 else ''
                print('    %s -> %s: %s%s' % (a, b, ', '.join(syms[:8]), more))
for i, (globs, _) in enumerate(known_cycles):
    if i not in seen_cycles:
        print('note: known cycle %s no longer occurs: remove it from KNOWN_CYCLES' % ' '.join(globs))

print('check-layers: %d includes of %d files, %d objects (%d files in the call graph), %d cycles: %s'
      % (n_includes, len(sources), n_objects, len(nodes), len(cycles), 'FAILED' if failed else 'ok'))
sys.exit(1 if failed else 0)
PYTHON
