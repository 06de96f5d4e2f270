#!/usr/bin/env python3
"""Checks hk's user documentation (README.md, docs/*.md, bench/RESULTS.md,
examples/train/README.md).

  scripts/check-docs.py links [ROOT]   every relative link resolves
  scripts/check-docs.py words [ROOT]   README.md and docs/ hold no lab notes

links: every markdown link (inline [text](target), reference definitions
[id]: target, and <a href="...">) that is not an http(s) or mailto URL must
name a file or folder of the repository (tracked, or new and not ignored by
git), relative to the page, without leaving the repository; an #anchor must
name a heading of the target page (GitHub's anchors: lower case, spaces to
hyphens, punctuation dropped, -1, -2 ... for repeats) or an explicit
id/name. URLs are not fetched. A page may also not mention paths outside
the repository (../shared, /tmp/..., /work/...).

words: README.md and docs/ are for users: no dates, git hashes, issue
numbers, real-time priority (chrt) or "session" (measurements, with their
dates and machines, belong in bench/RESULTS.md).

Exit status 0 when every check passes; 1 with one line per problem
(FILE:LINE: what is wrong) otherwise. Code blocks and code spans are not
read for links (they are for words).
"""

import os
import re
import subprocess
import sys
import unicodedata

PAGES = ["README.md", "docs/*.md", "bench/RESULTS.md", "examples/train/README.md"]
USER_PAGES = ["README.md", "docs/*.md"]

# Text that names a place outside the repository.
OUTSIDE = [
    (re.compile(r"\.\./shared\b"), "a path outside the repository (../shared)"),
    (re.compile(r"(?<![\w.])/tmp/"), "a path outside the repository (/tmp/...)"),
    (re.compile(r"(?<![\w.])/work/"), "a path outside the repository (/work/...)"),
]

# Lab notes that README.md and docs/ must not hold.
WORDS = [
    (re.compile(r"\bchrt\b"), "real-time priority (chrt): figures for users are measured as users run hk"),
    (re.compile(r"\bsessions?\b", re.I), "the word 'session'"),
    (re.compile(r"\bissues?\s*#?\d+", re.I), "an issue number"),
    (re.compile(r"(?<![\w-])#\d+\b"), "an issue number"),
    (re.compile(r"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b"), "a date"),
    (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"), "a git hash"),
]


def expand(root, patterns):
    out = []
    for p in patterns:
        if p.endswith("/*.md"):
            d = os.path.join(root, p[:-5])
            if os.path.isdir(d):
                out += sorted(os.path.join(p[:-5], f) for f in os.listdir(d) if f.endswith(".md"))
        elif os.path.exists(os.path.join(root, p)):
            out.append(p)
    return out


def repo_files(root):
    """Paths git knows (tracked, or untracked and not ignored), or None
    outside a git checkout (then the file system decides)."""
    try:
        r = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    files = set(f for f in r.stdout.decode("utf-8", "replace").split("\0") if f)
    files = set(f for f in files if os.path.exists(os.path.join(root, f)))
    dirs = set()
    for f in files:
        d = os.path.dirname(f)
        while d and d not in dirs:
            dirs.add(d)
            d = os.path.dirname(d)
    return files | dirs | {""}


def strip_code(lines):
    """The lines with fenced and indented code blocks blanked and code
    spans replaced by spaces (same line numbers)."""
    out = []
    fence = None
    prev_blank = True
    in_indented = False
    for line in lines:
        s = line.rstrip("\n")
        m = re.match(r"^ {0,3}(`{3,}|~{3,})", s)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
            prev_blank = False
            continue
        if m:
            fence = m.group(1)
            out.append("")
            continue
        is_code = (s.startswith("    ") or s.startswith("\t")) and (prev_blank or in_indented)
        if is_code and not re.match(r"^\s*([-*+]|\d+[.)])\s", s):
            in_indented = True
            out.append("")
            continue
        in_indented = in_indented and s.strip() == ""
        prev_blank = s.strip() == ""
        out.append(re.sub(r"(`+)(.+?)\1", lambda mm: " " * len(mm.group(0)), s))
    return out


def slug(text):
    """GitHub's anchor for a heading's text."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    t = re.sub(r"<[^>]+>", "", t)  # inline HTML
    t = t.replace("`", "").replace("*", "")
    t = t.strip().lower()
    keep = []
    for ch in t:
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LMN":
            keep.append(ch)
    return "".join(keep).replace(" ", "-")


def anchors_of(path, cache):
    if path in cache:
        return cache[path]
    names = set()
    seen = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError:
        cache[path] = names
        return names
    fence = None
    for line in lines:
        s = line.rstrip("\n")
        m = re.match(r"^ {0,3}(`{3,}|~{3,})", s)
        if fence:
            if m and m.group(1)[0] == fence[0]:
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        h = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", s)
        if h:
            base = slug(h.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            names.add(base if n == 0 else "%s-%d" % (base, n))
        for a in re.finditer(r"<a\s[^>]*(?:id|name)=\"([^\"]+)\"", s):
            names.add(a.group(1))
    cache[path] = names
    return names


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HREF = re.compile(r"<a\s[^>]*href=\"([^\"]+)\"")


def check_links(root, pages):
    problems = []
    known = repo_files(root)
    cache = {}
    real_root = os.path.realpath(root)
    for page in pages:
        path = os.path.join(root, page)
        with open(path, encoding="utf-8") as f:
            raw = f.readlines()
        for n, s in enumerate(raw, 1):
            for rx, what in OUTSIDE:
                if rx.search(s):
                    problems.append("%s:%d: %s" % (page, n, what))
        lines = strip_code(raw)
        for n, s in enumerate(lines, 1):
            targets = [m.group(1) for m in LINK.finditer(s)]
            targets += [m.group(1) for m in HREF.finditer(s)]
            m = REFDEF.match(s)
            if m:
                targets.append(m.group(1))
            for t in targets:
                err = check_target(root, real_root, known, cache, page, t)
                if err:
                    problems.append("%s:%d: link '%s': %s" % (page, n, t, err))
    return problems


def check_target(root, real_root, known, cache, page, target):
    if not target:
        return "empty target"
    if re.match(r"^(https?|mailto):", target, re.I):
        return None
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
        return "points outside the repository (only http(s) URLs may)"
    if target.startswith("/"):
        return "an absolute path: links are relative to the page"
    file_part, _, anchor = target.partition("#")
    file_part = re.sub(r"%20", " ", file_part)
    if file_part:
        rel = os.path.normpath(os.path.join(os.path.dirname(page), file_part))
        full = os.path.join(root, rel)
        if rel == ".." or rel.startswith("../") or not os.path.realpath(full).startswith(real_root):
            return "leaves the repository"
        if rel == ".":
            rel = ""
        if known is not None and rel not in known:
            return "no such file or folder in the repository (%s)" % (rel or ".")
        if known is None and not os.path.exists(full):
            return "no such file or folder (%s)" % rel
    else:
        full = os.path.join(root, page)
    if anchor:
        if os.path.isdir(full) or not full.endswith(".md"):
            return "an #anchor into a file that is not a markdown page"
        if anchor not in anchors_of(full, cache):
            return "no heading with the anchor #%s in %s" % (anchor, os.path.relpath(full, root))
    return None


def check_words(root, pages):
    problems = []
    for page in pages:
        with open(os.path.join(root, page), encoding="utf-8") as f:
            for n, s in enumerate(f, 1):
                for rx, what in WORDS:
                    m = rx.search(s)
                    if m:
                        problems.append("%s:%d: '%s': %s" % (page, n, m.group(0), what))
    return problems


def main(argv):
    if len(argv) < 2 or argv[1] not in ("links", "words"):
        print("usage: check-docs.py links|words [ROOT]", file=sys.stderr)
        return 2
    root = argv[2] if len(argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    root = os.path.abspath(root)
    if argv[1] == "links":
        pages = expand(root, PAGES)
        problems = check_links(root, pages)
        fix = "fix the link (or the heading it names)"
    else:
        pages = expand(root, USER_PAGES)
        problems = check_words(root, pages)
        fix = "move measurements and their history to bench/RESULTS.md"
    if not pages:
        print("check-docs: no pages found under %s" % root, file=sys.stderr)
        return 1
    for p in problems:
        print(p)
    if problems:
        print("check-docs %s: %d problem(s) in %d page(s) checked; %s"
              % (argv[1], len(problems), len(pages), fix))
        return 1
    print("check-docs %s: %d pages, no problem" % (argv[1], len(pages)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
