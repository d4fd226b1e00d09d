#!/usr/bin/env python3
"""Keeps docs/ARCHITECTURE.md an exact map of the tree: fails naming every backticked file, folder or
C++ name in it that the tree does not have, every Note [Name] it cites that no source defines, every
layer folder without a row in its folder table and every nested namespace it does not list.

What a backticked token is, tried in this order (`a(b)` is first cut to `a`, template arguments and
a leading `dtrain::` removed, a slot such as `<name>` read as "any name"):
  - skipped: a flag (`--resume`), a literal (`"local"`, `{...}`, `[rank r/N] ...`, `#include ...`), an
    absolute path (a machine's, `/proc/self/exe`), a setting (`exact = true`, `data.equalize: join`), a
    command or phrase (it holds a space), a dotted lowercase name (a configuration key
    `train.precision`, a run's file `results.json`, a test `examples.<name>`), a lowercase word (a
    strategy, label or field: `zero`, `unit`, `seed`);
  - a path: it holds a '/' or ends in .cpp .h .cmake .txt .md .py .sh. It must exist relative to the
    repository, src/dtrain/ or tests/; a lone name (`Spawn.cpp`, `zero/`) anywhere under src/, tests/
    or examples/, but in the folder table's row of a layer only in that layer; a name without an
    extension (`train/StepFeed`) as a folder or as a file of any extension. A path the tree lacks passes
    where the code writes it as a string (a metric `comm/bytes_per_step`, `checkpoints/`);
  - a GoogleTest name `Suite/Test` (both capitalised): both in tests/;
  - a C++ name: `a::b` qualified names, CamelCase names, ALL_CAPS names (macros, environment variables,
    CMake words) and snake_case names or calls (`load_resume_point`, `network()`). Each part must occur
    as a word in src/, tests/, examples/, cmake/ or a CMakeLists.txt; `layer::name` in src/dtrain/<layer>/,
    and each further `a::b` in one file that names both.
ALLOWED below lists the few tokens no rule can check, each with its reason.
    tests/tree/architecture_map_test.py SOURCE_DIR
"""
import fnmatch
import glob
import os
import re
import sys

DOCUMENT = "docs/ARCHITECTURE.md"
PATH_ENDINGS = (".cpp", ".h", ".cmake", ".txt", ".md", ".py", ".sh")
CODE_FOLDERS = ("src", "tests", "examples", "cmake")
# Tokens that name a run's files rather than the tree's, built by the code from parts: no string holds
# them whole.
ALLOWED = {
    "site_<rank>/log.txt": "a rank's log in a run folder (io/RunDir.h: site_dir() / log.txt)",
    "strategy/decentralized/node<i>/":
        "a checkpoint's key prefix (kPrefix + \"node{}\" in parallel/decentralized/DecentralizedState.cpp)",
}

SLOT = re.compile(r"<[A-Za-z_ ,0-9]+>")
IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


class Tree:
    """The files a token may name, and the words and strings of the code."""

    def __init__(self, root):
        self.root = root
        self.files = {}  # relative path -> text, of the code a name may be in
        for top in CODE_FOLDERS:
            for folder, dirs, names in os.walk(os.path.join(root, top)):
                # Not the fuzzers' inputs, nor this checker, whose own text names what it checks.
                dirs[:] = [d for d in dirs if d not in ("corpus", "__pycache__")]
                if os.path.relpath(folder, root) == os.path.join("tests", "tree"):
                    continue
                for name in names:
                    if name.endswith((".cpp", ".h", ".cc", ".hpp", ".cmake", ".txt", ".py", ".sh", ".in")):
                        path = os.path.join(folder, name)
                        self.files[os.path.relpath(path, root)] = read(path)
        self.files["CMakeLists.txt"] = read(os.path.join(root, "CMakeLists.txt"))
        self.words = set()
        for text in self.files.values():
            self.words.update(re.findall(IDENTIFIER, text))
        # CMake names built from a variable (dtrain_${layer}_tests): any name in the variable's place.
        self.cmake_names = {re.compile(r"\w+".join(map(re.escape, re.split(r"\$\{\w+\}", n))))
                            for path, text in self.files.items() if path.endswith((".txt", ".cmake"))
                            for n in re.findall(r"\w*\$\{\w+\}[\w${}]*", text)
                            if len(re.sub(r"\$\{\w+\}|_", "", n)) >= 3}  # a name, not only variables
        self.source_strings = "\n".join(s for path, text in self.files.items() if path.startswith("src/")
                                        for s in re.findall(r'"([^"\n]*)"', text))
        self.all_paths = []  # every file and folder under the code folders, relative
        for top in ("src", "tests", "examples"):
            for folder, dirs, names in os.walk(os.path.join(root, top)):
                rel = os.path.relpath(folder, root)
                self.all_paths.append(rel + "/")
                self.all_paths.extend(os.path.join(rel, n) for n in names)

    def exists(self, pattern, bases):
        """Whether `pattern` (a glob; a trailing '/' a folder; no extension: any) exists under a base."""
        folder = pattern.endswith("/")
        core = pattern.rstrip("/")
        stem_only = not folder and "." not in os.path.basename(core) and "*" not in os.path.basename(core)
        for base in bases:
            full = os.path.join(self.root, base, core)
            candidates = glob.glob(full, recursive=True)
            if stem_only:
                candidates += glob.glob(full + ".*")
            for c in candidates:
                if (folder and os.path.isdir(c)) or (not folder and os.path.exists(c)):
                    return True
        return False

    def exists_anywhere(self, name, under=("src/", "tests/", "examples/")):
        """Whether a lone name (a glob; `x/` a folder) is a file or folder somewhere below `under`."""
        return any(p.startswith(under) and fnmatch.fnmatchcase(_last(p), name) for p in self.all_paths)

    def written_by_code(self, token):
        """Whether a string of the code is `token` (with or without its last '/'): a metric, a run's file."""
        regex = "^" + SLOT.sub("[^\n]*", re.escape(token.rstrip("/"))) + "/?$"
        return re.search(regex, self.source_strings, re.M) is not None

    def word_in(self, word, prefix=""):
        return any(path.startswith(prefix) and re.search(rf"\b{re.escape(word)}\b", text)
                   for path, text in self.files.items())

    def in_one_file(self, first, second):
        a, b = re.compile(rf"\b{re.escape(first)}\b"), re.compile(rf"\b{re.escape(second)}\b")
        return any(a.search(text) and b.search(text) for text in self.files.values())


def _last(path):
    """A path's last part, a folder's with its '/'."""
    if path.endswith("/"):
        return path.rstrip("/").rsplit("/", 1)[-1] + "/"
    return path.rsplit("/", 1)[-1]


def spans(text):
    """(token, line number, the folder-table row's layer or None) of every backticked token, and of
    the file paths and a::b names in fenced blocks (the data-flow diagrams)."""
    out = []
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            for token in re.findall(r"[\w./-]*\w\.(?:cpp|h)\b", line):
                out.append((token, number, None))
            for token in re.findall(rf"{IDENTIFIER}(?:::{IDENTIFIER})+", line):
                out.append((token, number, None))
            continue
        row = re.match(r"\| `([a-z_0-9]+)/` \|", line)
        for token in re.findall(r"`([^`\n]+)`", line):
            out.append((token, number, row.group(1) if row else None))
    return out


def normalised(token):
    """The name a C++ token stands for: `f(args)` -> f, `T<U>` -> T, `dtrain::x` -> x."""
    name = re.sub(r"\(.*\)$", "", token)
    name = re.sub(r"(?<=[A-Za-z0-9])<[^<>]*>", "", name)  # template arguments (a slot follows _ or ::)
    name = re.sub(r"^dtrain::", "", name)
    return name


def kind(token):
    """'skip', 'path', 'test' or 'symbol'."""
    if token.startswith(("-", '"', "'", "{", "[", "#", "/", ".")) or "=" in token or ": " in token:
        return "skip"
    name = normalised(token)
    if re.search(r"\s", name):
        return "skip"
    if "/" in name:
        if re.fullmatch(r"[A-Z]\w*/[A-Z]\w*", name):
            return "test"
        return "path"
    if name.endswith(PATH_ENDINGS):
        return "path"
    if "::" in name:
        return "symbol"
    if re.fullmatch(r"[a-z0-9_<>*]+(\.[a-z0-9_<>*]+)+", name):
        return "skip"  # a configuration key, a run's file, a CTest name
    if not re.fullmatch(r"[A-Za-z_<][A-Za-z0-9_<>]*", name):
        return "skip"
    if re.search(r"[A-Z]", name) or "_" in name or token.endswith(")"):
        return "symbol"  # CamelCase, ALL_CAPS (a macro, an environment variable), snake_case, a call
    return "skip"


def check_path(tree, token, layer):
    if token in ALLOWED:
        return None
    pattern = SLOT.sub("*", token)
    lone = "/" not in pattern.rstrip("/")
    names_a_layer = pattern.endswith("/") and os.path.isdir(os.path.join(tree.root, "src/dtrain", pattern))
    if lone and layer and not names_a_layer:
        if tree.exists("**/" + pattern, [f"src/dtrain/{layer}"]):
            return None
        return f"not in src/dtrain/{layer}/, whose row names it"
    if lone:
        if tree.exists(pattern, ["", "src/dtrain", "tests"]) or tree.exists_anywhere(pattern):
            return None
    elif tree.exists(pattern, ["", "src/dtrain", "tests"]):
        return None
    if tree.written_by_code(token):
        return None
    return "no such file or folder (relative to the repository, src/dtrain/ or tests/)"


def check_symbol(tree, token):
    name = normalised(token)
    parts = [p for p in name.split("::") if p]
    patterns = [SLOT.sub(r"\\w+", re.escape(p)) for p in parts]
    if any(p.startswith("<") for p in parts):
        return None  # `dtrain::<layer>`: a pattern, no name
    for part, pattern in zip(parts, patterns):
        if "<" in part:
            if not any(re.fullmatch(pattern, w) for w in tree.words):
                return f"no name matching {part} in {', '.join(CODE_FOLDERS)}"
        elif part not in tree.words and not any(n.fullmatch(part) for n in tree.cmake_names):
            return f"{part} occurs nowhere in {', '.join(CODE_FOLDERS)} or a CMakeLists.txt"
    if len(parts) > 1 and os.path.isdir(os.path.join(tree.root, "src/dtrain", parts[0])):
        if not tree.word_in(parts[1], f"src/dtrain/{parts[0]}/"):
            return f"{parts[1]} is not in src/dtrain/{parts[0]}/"
        parts = parts[1:]
    for first, second in zip(parts, parts[1:]):
        if not tree.in_one_file(first, second):
            return f"no file names both {first} and {second}"
    return None


def check_test(tree, token):
    for part in token.split("/"):
        if not tree.word_in(part, "tests/"):
            return f"{part} is not in tests/"
    return None


def check_notes(tree, text):
    """Every Note [Name] the document cites is written once as `// Note [Name]` in the code."""
    defined = set()
    for body in tree.files.values():
        defined.update(re.findall(r"^\s*(?://|#)\s*Note \[([^\]]+)\]\s*$", body, re.M))
    problems = []
    for number, line in enumerate(text.split("\n"), 1):
        for name in re.findall(r"Note \[([^\]]+)\]", line):
            if name not in defined:
                problems.append(f"{DOCUMENT}:{number}: Note [{name}]: no source writes it (// Note [{name}])")
    return problems


def check_folder_table(root, text):
    """Every layer folder of src/dtrain/ has a row of the folder table."""
    rows = set(re.findall(r"^\| `([a-z_0-9]+)/` \|", text, re.M))
    problems = []
    for name in sorted(os.listdir(os.path.join(root, "src/dtrain"))):
        if os.path.isfile(os.path.join(root, "src/dtrain", name, "CMakeLists.txt")) and name not in rows:
            problems.append(f"{DOCUMENT}: src/dtrain/{name}/ is a layer without a row in the folder table")
    return problems


def nested_namespaces(tree):
    """Every namespace of src/ other than dtrain::<layer>: dtrain::a::b, and `namespace b {` inside one."""
    found = set()
    for path, text in tree.files.items():
        if not path.startswith("src/"):
            continue
        current = None
        for line in text.split("\n"):
            opened = re.match(r"namespace dtrain::([a-z_:]+) \{", line)
            if opened:
                current = opened.group(1)
                if "::" in current or not os.path.isdir(os.path.join(tree.root, "src/dtrain", current)):
                    found.add(current)
            elif re.match(r"\}\s*// namespace dtrain", line):
                current = None
            else:
                inner = re.match(r"\s*namespace ([a-z_]+) \{", line)
                if inner and current:
                    found.add(f"{current}::{inner.group(1)}")
    return found


def check_namespaces(tree, tokens):
    listed = {re.sub(r"^dtrain::", "", t) for t in tokens}
    return [f"{DOCUMENT}: namespace dtrain::{ns} is in src/ but not in the list of nested namespaces"
            for ns in sorted(nested_namespaces(tree)) if ns not in listed and f"dtrain::{ns}" not in tokens]


def main():
    root = os.path.abspath(sys.argv[1])
    text = read(os.path.join(root, DOCUMENT))
    tree = Tree(root)
    problems = []
    checked = skipped = 0
    found = spans(text)
    for token, number, layer in found:
        what = kind(token)
        if what == "skip":
            skipped += 1
            continue
        checked += 1
        why = {"path": lambda: check_path(tree, token, layer), "test": lambda: check_test(tree, token),
               "symbol": lambda: check_symbol(tree, token)}[what]()
        if why:
            problems.append(f"{DOCUMENT}:{number}: `{token}` ({what}): {why}")
    problems += check_notes(tree, text)
    problems += check_folder_table(root, text)
    problems += check_namespaces(tree, {t for t, _, _ in found})
    problems += [f"{__file__}: ALLOWED lists `{t}`, which {DOCUMENT} no longer gives: remove it"
                 for t in ALLOWED if t not in {t for t, _, _ in found}]
    if problems:
        sys.exit("\n".join(problems) + f"\nFAIL: {len(problems)} names in {DOCUMENT} the tree does not bear out")
    print(f"PASS: {checked} paths and names in {DOCUMENT} found in the tree ({skipped} tokens neither), every "
          f"Note cited defined, every layer in the folder table, every nested namespace listed")


if __name__ == "__main__":
    main()
