#!/usr/bin/env python3
"""Keeps the tree checkable out on a file system that ignores case (macOS, Windows): fails naming
every two paths, files or folders, that differ only in case (cli/main.cpp beside cli/Main.cpp), since
a checkout there keeps one and loses the other.

The paths are git's (tracked, and untracked ones git does not ignore) where SOURCE_DIR is a git
checkout; otherwise every file under SOURCE_DIR but .git and build*/ folders.
    tests/tree/case_test.py SOURCE_DIR
"""
import collections
import os
import subprocess
import sys


def git_paths(source):
    """The checkout's paths as git lists them, or None where there is no git or no repository."""
    try:
        out = subprocess.run(["git", "-C", source, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def walked_paths(source):
    paths = []
    for folder, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d != ".git" and not (folder == source and d.startswith("build"))]
        for name in files:
            paths.append(os.path.relpath(os.path.join(folder, name), source).replace(os.sep, "/"))
    return paths


def with_folders(paths):
    """Every path and every folder above it: two folders differing in case collide as files do."""
    out = set()
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]))
    return out


def collisions(paths):
    """Groups of two or more spellings of one path, ignoring case."""
    by_folded = collections.defaultdict(set)
    for path in with_folders(paths):
        by_folded[path.casefold()].add(path)
    return sorted(sorted(group) for group in by_folded.values() if len(group) > 1)


def main():
    source = os.path.abspath(sys.argv[1])
    paths = git_paths(source)
    origin = "git ls-files"
    if paths is None:
        paths, origin = walked_paths(source), "a walk of the tree"
    found = collisions(paths)
    if found:
        lines = [" and ".join(group) + ": equal but for case; rename one (git mv)" for group in found]
        sys.exit("\n".join(lines) + f"\nFAIL: {len(found)} sets of paths collide where case is ignored")
    print(f"PASS: {len(paths)} paths ({origin}), no two equal but for case")


if __name__ == "__main__":
    main()
