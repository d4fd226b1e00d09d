#!/usr/bin/env python3
"""Keeps what a strategy can do in its registration: fails naming every line of a C++ source under
src/dtrain/ outside parallel/ that compares a string with a registered strategy's name
(`strategy == "data_parallel"`, `"local" != s`, `s.compare("zero")`) or lists two of them
(`{"data_parallel", "zero"}`). Such a line decides by name what parallel::StrategyCapabilities
(parallel/Registry.h) declares where the strategy registers, and a new strategy would pass it by.

The names are the folders of src/dtrain/parallel/ that hold a DTRAIN_REGISTER_STRATEGY(<folder>, ...)
call. Comments are not read. ALLOWED lists the lines that must stay, each with its reason.
    tests/tree/strategy_names_test.py SOURCE_DIR
"""
import os
import re
import sys

SOURCES = (".cpp", ".h", ".cc", ".hpp")
REGISTRATION = re.compile(r"DTRAIN_REGISTER_STRATEGY\(\s*(\w+)\s*,")

# "path relative to the source folder": "why the name must be compared there". Empty: every check
# outside parallel/ reads the registry.
ALLOWED = {}


def registered_names(parallel):
    """The folders of parallel/ whose files register a strategy under the folder's name."""
    names = set()
    for folder in sorted(os.listdir(parallel)):
        path = os.path.join(parallel, folder)
        if not os.path.isdir(path):
            continue
        for name in sorted(os.listdir(path)):
            if name.endswith(SOURCES):
                text = open(os.path.join(path, name), encoding="utf-8", errors="replace").read()
                if folder in REGISTRATION.findall(text):
                    names.add(folder)
    return names


def code_of(line, in_block):
    """The line without its comments, and whether a /* */ comment is still open after it."""
    out, i, quote = [], 0, None
    while i < len(line):
        if in_block:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            i, in_block = end + 2, False
            continue
        c = line[i]
        if quote:
            out.append(c)
            if c == "\\" and i + 1 < len(line):
                out.append(line[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif line.startswith("//", i):
            break
        elif line.startswith("/*", i):
            in_block = True
            i += 1
        else:
            if c in "\"'":
                quote = c
            out.append(c)
        i += 1
    return "".join(out), in_block


def patterns(names):
    name = "(?:" + "|".join(re.escape(n) for n in sorted(names)) + ")"
    literal = r'(?:std::string(?:_view)?\s*\(\s*)?"' + name + r'"s?'
    return [
        ("compares a string with", re.compile(r"[!=]=\s*" + literal)),
        ("compares a string with", re.compile(r'"' + name + r'"s?\s*\)?\s*[!=]=')),
        ("compares a string with", re.compile(r"\.compare\(\s*" + literal)),
        ("lists", re.compile(r'"' + name + r'"\s*,\s*"' + name + r'"')),
    ]


def main():
    source = os.path.abspath(sys.argv[1])
    root = os.path.join(source, "src", "dtrain")
    parallel = os.path.join(root, "parallel")
    names = registered_names(parallel)
    if not {"local", "data_parallel"} <= names:
        sys.exit(f"FAIL: found the strategies {sorted(names)} under {parallel}; expected local and data_parallel "
                 "among them (has DTRAIN_REGISTER_STRATEGY changed?)")
    checks = patterns(names)
    problems = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        if os.path.commonpath([folder, parallel]) == parallel:
            continue
        for file in sorted(files):
            if not file.endswith(SOURCES):
                continue
            path = os.path.join(folder, file)
            relative = os.path.relpath(path, source)
            if relative in ALLOWED:
                continue
            in_block = False
            for number, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                code, in_block = code_of(line.rstrip("\n"), in_block)
                for what, pattern in checks:
                    found = pattern.search(code)
                    if found:
                        problems.append(f"{relative}:{number}: {what} a strategy's name ({found.group(0).strip()}); "
                                        "declare the capability in parallel::StrategyCapabilities where the "
                                        "strategy registers and read it through parallel/Registry.h")
                        break
    if problems:
        sys.exit("\n".join(problems) + f"\nFAIL: {len(problems)} lines outside parallel/ decide by a strategy's name")
    print(f"PASS: no source under src/dtrain/ outside parallel/ compares a string with a strategy's name "
          f"({', '.join(sorted(names))})")


if __name__ == "__main__":
    main()
