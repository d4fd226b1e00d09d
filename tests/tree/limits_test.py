#!/usr/bin/env python3
"""Keeps the sources readable: fails naming every C++ file under src/ or tests/ longer than 600 lines
and every function in src/ longer than 80 (from its first line to its closing brace).

A function is found the way clang-format lays this tree out: a definition starts at column 0 (not a
namespace, class, struct, enum or preprocessor line) and ends at the next line that is a lone `}` at
column 0. Lambdas and member functions defined inside a class body count with their enclosing
definition.
    tests/tree/limits_test.py SOURCE_DIR
"""
import os
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
SOURCES = (".cpp", ".h", ".cc", ".hpp")
NOT_A_FUNCTION = re.compile(r"^(namespace|class|struct|enum|union|template|using|extern|static_assert|typedef|#|//|/\*|\}|\))")


def functions(lines):
    """(first line, number of lines, text of the first line) of every top-level definition."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line or line[0].isspace() or NOT_A_FUNCTION.match(line) or "(" not in line:
            i += 1
            continue
        # The definition's opening brace ends its signature, within a few lines; a declaration
        # ends in ';' first.
        j = i
        while j < len(lines) and j < i + 10 and not lines[j].rstrip().endswith(("{", ";")):
            j += 1
        if j >= len(lines) or not lines[j].rstrip().endswith("{") or "=" in line.split("(")[0]:
            i += 1
            continue
        k = j + 1
        while k < len(lines) and not lines[k].startswith("}"):
            k += 1
        yield i + 1, k - i + 1, line.strip()
        i = k + 1


def main():
    source = os.path.abspath(sys.argv[1])
    problems = []
    for top in ("src", "tests"):
        for folder, _, files in os.walk(os.path.join(source, top)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, source)
                lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
                if len(lines) - 1 > MAX_FILE_LINES:
                    problems.append(f"{relative}: {len(lines) - 1} lines, more than {MAX_FILE_LINES}; split it by concern")
                if top != "src":
                    continue
                for first, length, text in functions(lines):
                    if length > MAX_FUNCTION_LINES:
                        problems.append(f"{relative}:{first}: a function of {length} lines, more than "
                                        f"{MAX_FUNCTION_LINES}: {text[:80]}")
    if problems:
        sys.exit("\n".join(problems) + f"\nFAIL: {len(problems)} files or functions over the limits")
    print(f"PASS: every source under src/ and tests/ within {MAX_FILE_LINES} lines, every function in src/ "
          f"within {MAX_FUNCTION_LINES}")


if __name__ == "__main__":
    main()
