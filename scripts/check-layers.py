#!/usr/bin/env python3
"""check-layers.py - the house's walls, checked from the code itself.

Fails (exit 1, one line per problem) on:
  1. an include that points up the layers. The order, top to bottom:
       bench, examples
       launcher | worker        (neither includes the other)
       observe, coordinator, collectives
       collectives/transport, device, topology
       common
       include                  (the public header: any file may use it)
     A file may include a header of its own folder, of a folder below, or
     of another folder on its own floor (if no circle of folders follows);
     examples/ include only include/ and examples/ (the public API).
  2. a circle between folders (by includes and by the functions and
     objects one folder's files take from another's);
  3. a circle between files: file A uses a function or object defined in
     B while B uses one defined in A (a .c file and its .h count as one);
  4. a getenv of an HK_* variable outside common/config.c (the one table
     of settings, common/config.h).
tests/ is not checked. Run from anywhere: python3 scripts/check-layers.py
[REPO]. Reads files as text (no compiler): identifiers in comments and
strings are ignored; a name defined in several files is no edge.
"""
import os
import re
import subprocess
import sys

FLOORS = [
    ["bench", "examples"],
    ["launcher", "worker"],
    ["observe", "coordinator", "collectives", "planner"],
    ["collectives/transport", "device", "topology"],
    ["common"],
    ["include"],
]
# floor-mates that must not include each other at all
APART = {("launcher", "worker"), ("worker", "launcher")}
SOURCES = (".c", ".h", ".cu", ".cuh", ".cpp")


def folder_of(path):
    """The room a file belongs to (collectives/transport is its own)."""
    if path.startswith("collectives/transport/"):
        return "collectives/transport"
    return path.split("/", 1)[0]


def floor_of(folder):
    for i, names in enumerate(FLOORS):
        if folder in names:
            return i
    return None


def tracked_files(repo):
    out = subprocess.run(["git", "-C", repo, "ls-files", "--cached",
                          "--others", "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(p for p in out.splitlines()
                  if p.endswith(SOURCES) and floor_of(folder_of(p)) is not None
                  and os.path.exists(os.path.join(repo, p)))


def strip(text):
    """The code without comments, strings and character literals."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", text)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# a function or object defined at file scope, not static
DEFINITION = re.compile(
    r"^(?!static\b|typedef\b|extern\b|struct\b|enum\b|union\b|#|return\b)"
    r"[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*(?:\([^;{]*?\)\s*\{|"
    r"(?:\[[^\]]*\])*\s*=)", re.M)
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
# any function or object defined at file scope, static or not
STATIC_OR_NOT = re.compile(
    r"^(?!typedef\b|extern\b|struct\b|enum\b|union\b|#|return\b)"
    r"[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*(?:\([^;{]*?\)\s*\{|"
    r"(?:\[[^\]]*\])*\s*=)", re.M)
HK_GETENV = re.compile(r'getenv\s*\(\s*"HK_')


def resolve(repo, path, name):
    for base in ("", "include/", os.path.dirname(path) + "/"):
        cand = os.path.normpath(base + name)
        if os.path.exists(os.path.join(repo, cand)):
            return cand
    return None


def unit(path):
    """A .c file and its .h are one unit."""
    return os.path.splitext(path)[0]


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..")
    files = tracked_files(repo)
    problems = []
    includes = {}
    code = {}
    for p in files:
        with open(os.path.join(repo, p), encoding="utf-8",
                  errors="replace") as f:
            raw = f.read()
        if HK_GETENV.search(raw) and p != "common/config.c":
            for n, line in enumerate(raw.splitlines(), 1):
                if HK_GETENV.search(line):
                    problems.append(
                        f"{p}:{n}: reads an HK_* variable: only "
                        "common/config.c's table may (hk_config_load, "
                        "hk_config_load_var, hk_config_env)")
        includes[p] = [r for r in (resolve(repo, p, m)
                                   for m in INCLUDE.findall(raw)) if r]
        code[p] = strip(raw)

    # 1. includes against the floors
    folder_edges = {}
    for p, incs in includes.items():
        a = folder_of(p)
        for q in incs:
            b = folder_of(q)
            if a == b:
                continue
            folder_edges.setdefault(a, {}).setdefault(b, set()).add(
                f"{p} includes {q}")
            fa, fb = floor_of(a), floor_of(b)
            if fb is None:
                continue
            if a == "examples" and b != "include":
                problems.append(f"{p}: includes {q}: examples/ use only the "
                                "public API (include/)")
            elif fb < fa:
                problems.append(f"{p}: includes {q}: {b}/ is above {a}/ "
                                "(the arrow points up)")
            elif (a, b) in APART:
                problems.append(f"{p}: includes {q}: {a}/ and {b}/ must "
                                "not use each other")

    # the functions and objects each source file defines; a name defined
    # in more than one file (two programs' mains) is no edge, nor is a
    # name a file defines itself (a static namesake), nor a name from a
    # program the user cannot link with (examples/ link only libhk).
    # Headers declare what others define: only source files use.
    defined, own = {}, {}
    for p in files:
        if p.endswith(".h") or p.endswith(".cuh"):
            continue
        own[p] = set(STATIC_OR_NOT.findall(code[p]))
        for name in set(DEFINITION.findall(code[p])):
            defined.setdefault(name, set()).add(p)
    owner = {n: next(iter(ps)) for n, ps in defined.items()
             if len(ps) == 1 and n != "main"}
    unit_edges = {}
    for p in own:
        u = unit(p)
        for name in set(IDENT.findall(code[p])) - own[p]:
            q = owner.get(name)
            if not q or unit(q) == u or \
                    (folder_of(q) == "examples") != (folder_of(p) == "examples"):
                continue
            unit_edges.setdefault(u, {}).setdefault(unit(q), set()).add(name)
            a, b = folder_of(p), folder_of(q)
            if a != b:
                folder_edges.setdefault(a, {}).setdefault(b, set()).add(
                    f"{p} takes {name} from {q}")

    # 2. circles between folders, 3. between files
    for edges, what in ((folder_edges, "folders"), (unit_edges, "files")):
        graph = {a: set(b) for a, b in edges.items()}
        for scc in components(graph):
            if len(scc) > 1:
                ring = " <-> ".join(sorted(scc))
                names = []
                for a in sorted(scc):
                    for b in sorted(scc):
                        if b in edges.get(a, {}):
                            why = sorted(edges[a][b])[:2]
                            if what == "files":
                                why = [f"{a} takes {', '.join(why)} from {b}"]
                            names += why
                more = f"; and {len(names) - 12} more" if len(names) > 12 else ""
                problems.append(f"a circle between {what}: {ring}: " +
                                "; ".join(names[:12]) + more)

    for line in problems:
        print(line)
    if problems:
        print(f"check-layers: {len(problems)} problem(s) in {len(files)} "
              "files; the order is in scripts/check-layers.py and "
              "docs/design.md")
        return 1
    print(f"check-layers: {len(files)} files, every arrow points down, "
          "no circle, HK_* read only by common/config.c")
    return 0


def components(graph):
    """Strongly connected components (Tarjan), iteratively."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    nodes = set(graph)
    for v in graph.values():
        nodes |= set(v)
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                scc = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    scc.add(w)
                    if w == v:
                        break
                out.append(scc)
    return out


if __name__ == "__main__":
    sys.exit(main())
