#!/usr/bin/env python3
"""Checks that every source compiles without the precompiled <torch/torch.h>.

The build force-includes the PCH into every source that uses LibTorch (Note [Sources without
LibTorch] in cmake/TorchFreeSources.cmake), so a source that forgets an include still builds, until
someone builds without PCH (CMAKE_DISABLE_PRECOMPILE_HEADERS=ON, another compiler, another LibTorch).
This runs each compile command of BUILD_DIR/compile_commands.json again with -fsyntax-only, without
the PCH and without optimisation, JOBS at a time, and prints the first errors of every source that
fails. About 30 minutes on two cores for the whole tree; name sources to check only those.

usage: scripts/check-includes.py [BUILD_DIR=build] [JOBS=2] [SOURCE ...]
exit status: 0 when every checked source compiles, 1 otherwise, 2 on bad usage.
"""
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys


def strip_pch(command):
    """The compile command without the PCH, its output file and optimisation, as a syntax check."""
    args = shlex.split(command)
    out = [args[0], "-fsyntax-only"]
    i = 1
    while i < len(args):
        arg = args[i]
        if arg == "-include" and i + 1 < len(args) and "cmake_pch" in args[i + 1]:
            i += 2
            continue
        if arg in ("-o", "-MF", "-MT", "-MQ"):
            i += 2
            continue
        if arg in ("-Winvalid-pch", "-MD", "-MMD") or arg.startswith("-O"):
            i += 1
            continue
        out.append(arg)
        i += 1
    return out


def main():
    argv = sys.argv[1:]
    build = argv[0] if argv else "build"
    jobs = int(argv[1]) if len(argv) > 1 else 2
    only = {os.path.realpath(p) for p in argv[2:]}
    database = os.path.join(build, "compile_commands.json")
    if not os.path.isfile(database):
        print(f"check-includes: {database} not found: configure the build first (scripts/build.sh)",
              file=sys.stderr)
        return 2
    with open(database) as f:
        entries = [e for e in json.load(f) if "cmake_pch" not in e["file"]]
    if only:
        entries = [e for e in entries if os.path.realpath(e["file"]) in only]
        missing = only - {os.path.realpath(e["file"]) for e in entries}
        if missing:
            print(f"check-includes: not in {database}: {', '.join(sorted(missing))}", file=sys.stderr)
            return 2

    def check(entry):
        run = subprocess.run(strip_pch(entry["command"]), cwd=entry["directory"], capture_output=True,
                             text=True)
        errors = [line for line in run.stderr.splitlines() if "error" in line][:3]
        return entry["file"], run.returncode, errors

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for source, status, errors in pool.map(check, entries):
            if status != 0:
                failed += 1
                print(f"FAIL {source}")
                for line in errors:
                    print(f"    {line}")
    print(f"check-includes: {len(entries) - failed} of {len(entries)} sources compile without the PCH")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
