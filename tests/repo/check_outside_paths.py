#!/usr/bin/env python3
"""Fails if a tracked file names a path outside the repository.

The project stands alone: everything a test, tool or document relies on lives in the
tree, or in the model cache `~/.cache/minfer` that scripts/setup.sh fills from PyPI.
This check reads every tracked text file (`git ls-files`; a plain walk when the tree
is not a git checkout) and reports, as FILE:LINE: reason, each

  1. relative escape: a run of `../` longer than the file's depth below the root
     (`../shared/x` in the root README, `../../x` in docs/), i.e. outside the tree
     whether it is read relative to the file or to the root; and a shorter run whose
     next component, read relative to the file, is neither tracked nor git-ignored
     (`../shared/x` in docs/ names nothing in the tree: read from the root, where
     scripts run, it is outside);
  2. anchored escape: `..` after a variable that names the root (`${PROJECT_SOURCE_DIR}/..`,
     `${CMAKE_SOURCE_DIR}/..`, `$ROOT/..`, `ROOT.parent`, `os.path.join(ROOT, "..")`),
     or after one that names the file's folder (`$(dirname "$0")/..`,
     `${CMAKE_CURRENT_SOURCE_DIR}/..`, `Path(__file__).parents[k]`) once it climbs above
     the root;
  3. absolute path into a user or workspace area: /home/NAME, /root/, /Users/NAME,
     /work/, /workspace/, /mnt/, /media/, /srv/, C:\\Users (system paths such as /usr,
     /dev, /proc, /tmp are fine);
  4. home-relative path (`~/`, `$HOME/`, `$ENV{HOME}/`, `Path.home() / "..."`) other than
     the model cache `.cache/minfer`.

Not read: binary files (a NUL byte), and third-party data kept verbatim (vocabularies,
tokenizer.json files, chat templates and the renders that embed them), whose text is
data, not a reference: a vocabulary holds tokens such as "../" and a template may name
"/mnt/data". This file and its test are skipped too: they spell the patterns out.

usage: check_outside_paths.py [ROOT]   (default: the repository holding this file)
exit 0: clean; 1: findings (listed); 2: usage error.
"""
import fnmatch
import os
import re
import subprocess
import sys

# Verbatim third-party data (tests/data/README.md says where each comes from).
SKIP_GLOBS = [
    "tests/data/vocab/*",
    "tests/data/tokenizers/*",
    "tests/data/templates/*",
    "tests/data/chat_template/*.json",
    "tests/repo/check_outside_paths.py",
    "tests/repo/test_check_outside_paths.py",
]

# Rule 1: a leading run of "../" (or a lone ".."), not preceded by a path character,
# and the component after it.
RELATIVE_RUN = re.compile(r"(?<![\w.$}/~-])((?:\.\./)+|\.\.(?=[\"'`\s)]|$))([\w.+-]*)")
# Rule 2: variables that name the repository root, then "/.." components.
ROOT_ANCHOR = re.compile(
    r"(?:\$\{(?:PROJECT_SOURCE_DIR|CMAKE_SOURCE_DIR|sourceDir|ROOT|REPO|REPO_ROOT|TOP)\}"
    r"|\$(?:ROOT|REPO|REPO_ROOT|TOP)\b\"?)((?:/\.\.)+)")
# ... variables that name the file's own folder.
FILE_ANCHOR = re.compile(
    r"(?:\$\{CMAKE_CURRENT_(?:SOURCE|LIST)_DIR\}|\$\(dirname \"?\$(?:0|\{BASH_SOURCE\[0\]\})\"?\)"
    r"|\$(?:HERE|SCRIPT_DIR)\b|\$\{(?:HERE|SCRIPT_DIR)\})((?:/\.\.)+)")
PY_ROOT_PARENT = re.compile(r"\b(?:ROOT|REPO|REPO_ROOT|TOP)\s*\.\s*parent\b")
PY_ROOT_JOIN_UP = re.compile(r"os\.path\.join\(\s*(?:ROOT|REPO|REPO_ROOT|TOP)\s*,\s*[\"']\.\.[\"']")
PY_FILE_PARENTS = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]")
PY_FILE_PARENT_CHAIN = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?((?:\.parent\b)+)")
# Rule 3.
ABSOLUTE = re.compile(
    r"(?<![\w.$}~-])(/home/[\w.-]+|/root/|/Users/[\w.-]+|/work/|/workspace/|/mnt/|/media/|/srv/"
    r"|[A-Za-z]:\\\\?Users\\)")
# Rule 4.
HOME_REL = re.compile(r"(?:(?<![\w/])~|\$HOME\b|\$\{HOME\}|\$ENV\{HOME\})/([^\s\"'`)]*)")
PY_HOME = re.compile(r"Path\.home\(\)\s*/\s*[\"']([^\"']*)[\"']")
CACHE = ".cache"  # ~/.cache/minfer, the model cache; "~/.cache" alone is its parent


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                             capture_output=True).stdout
        return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x != "build"]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return sorted(files)


class Tree:
    """What exists in the repository: tracked paths and their folders, then git-ignored
    ones (build outputs that a relative path may name)."""

    def __init__(self, root, files):
        self.root = root
        self.known = set()
        for f in files:
            parts = f.split("/")
            for i in range(1, len(parts) + 1):
                self.known.add("/".join(parts[:i]))

    def has(self, rel):
        if rel in self.known or os.path.exists(os.path.join(self.root, rel)):
            return True
        # "rel/" as well: an ignore pattern "build/" matches only a folder, and the
        # folder may not exist yet.
        r = subprocess.run(["git", "-C", self.root, "check-ignore", "--no-index", rel,
                            rel + "/"], capture_output=True)
        return r.returncode == 0


def line_findings(tree, rel, depth, line):
    found = []
    for m in RELATIVE_RUN.finditer(line):
        n = m.group(1).count("..")
        if n > depth:
            found.append(f"'{m.group(1)}' climbs {n} level(s) from a file {depth} below the root")
        elif m.group(2) and m.group(2) not in (".", ".."):
            base = rel.split("/")[:depth - n]
            target = "/".join(base + [m.group(2)])
            if not tree.has(target):
                found.append(f"'{m.group(0)}' names '{target}', which is not in the repository")
    for m in ROOT_ANCHOR.finditer(line):
        found.append(f"'{m.group(0)}' leaves the root")
    for m in FILE_ANCHOR.finditer(line):
        n = m.group(1).count("..")
        if n > depth:
            found.append(f"'{m.group(0)}' climbs {n} level(s) from a file {depth} below the root")
    for rx in (PY_ROOT_PARENT, PY_ROOT_JOIN_UP):
        for m in rx.finditer(line):
            found.append(f"'{m.group(0)}' leaves the root")
    for m in PY_FILE_PARENTS.finditer(line):
        if int(m.group(1)) > depth:
            found.append(f"'{m.group(0)}' climbs above the root")
    for m in PY_FILE_PARENT_CHAIN.finditer(line):
        if m.group(1).count(".parent") - 1 > depth:
            found.append(f"'{m.group(0)}' climbs above the root")
    for m in ABSOLUTE.finditer(line):
        found.append(f"absolute path '{m.group(1)}'")
    for m in HOME_REL.finditer(line):
        rest = m.group(1)
        if not (rest == CACHE or rest.startswith(CACHE + "/minfer")):
            found.append(f"home path '{m.group(0)}' (only the model cache ~/.cache/minfer is allowed)")
    for m in PY_HOME.finditer(line):
        if not m.group(1).startswith(CACHE):
            found.append(f"home path '{m.group(0)}' (only the model cache ~/.cache/minfer is allowed)")
    return found


def check(root):
    findings = []
    files = tracked_files(root)
    tree = Tree(root, files)
    for rel in files:
        if any(fnmatch.fnmatch(rel, g) for g in SKIP_GLOBS):
            continue
        path = os.path.join(root, rel)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data[:65536]:
            continue
        depth = rel.count("/")
        for no, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            for why in line_findings(tree, rel, depth, line):
                findings.append(f"{rel}:{no}: {why}")
    return findings


def main(argv):
    if len(argv) > 2:
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))
    findings = check(root)
    for f in findings:
        print(f)
    if findings:
        print(f"check_outside_paths: {len(findings)} reference(s) to paths outside the "
              "repository", file=sys.stderr)
        return 1
    print("check_outside_paths: ok", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
