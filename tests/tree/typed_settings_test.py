#!/usr/bin/env python3
"""Enumerated settings are compared as enums: fails naming every place under src/dtrain/ where a string
literal that is one of their names is compared with == or !=. Their names are those of the EnumNames
tables in src/dtrain/config/RunConfig.h ("bf16", "join", "cuda" ...), compared nowhere outside config/,
and in the strategies' option headers, src/dtrain/parallel/**/*Options.h ("powersgd", "1f1b",
"cut_points", "topk", "nesterov" ...), compared nowhere at all.

config/ turns the text into the enum once (Options.h, EnumField); code above it compares
config::Precision::Bf16, never "bf16", and a strategy compares GradCompression::PowerSgd, never
"powersgd". Text that is not a setting's value but happens to share a name (comm's backend names, a
command-line flag of `dtrain launch`) is listed in ALLOWED with the reason; an entry that no longer
matches anything fails too, so the list stays exact.
    tests/tree/typed_settings_test.py SOURCE_DIR
"""
import glob
import os
import re
import sys

SOURCES = (".cpp", ".h")
TABLE = re.compile(r"util::EnumNames<\s*(\w+)\s*,\s*\d+\s*>\s*(\w+)\s*\{(.*?)\};", re.S)
# a.b->c::d, with calls of no or simple arguments along it: config_.train.device, comm->backend()
OPERAND = r"[A-Za-z_]\w*(?:(?:\.|->|::)[A-Za-z_]\w*|\([\w.]*\)|\[[^\]\n]*\])*"
LITERAL = r'"((?:[^"\\\n]|\\.)*)"'
COMPARISON = re.compile(rf"({OPERAND})\s*(?:==|!=)\s*{LITERAL}|{LITERAL}\s*(?:==|!=)\s*({OPERAND})")

# (file under src/dtrain/, the operand compared, why it is text and not a setting)
ALLOWED = [
    ("comm/Backend.cpp", "configured", "comm/ is below config/ and names its backends by text"),
    ("comm/Backend.cpp", "backend.name", "comm::BackendOptions::name, comm's own name of a backend"),
    ("comm/rendezvous/Rendezvous.cpp", "text", "an environment variable's spelling of a boolean"),
    ("launch/Launcher.cpp", "configured", "start_method_for takes parallel.backend as comm's backend name"),
    ("launch/Launcher.cpp", "o.backend", "LaunchOptions::backend, `dtrain launch --backend`'s start method"),
    ("launch/Launcher.cpp", "options.backend", "LaunchOptions::backend, the launcher's start method"),
    ("launch/Launcher.cpp", "comm::choose_backend(layout).name", "comm's name of the backend it chose"),
    ("launch/Attempt.cpp", "job.options.backend", "LaunchOptions::backend, the launcher's start method"),
    ("launch/Attempt.cpp", "options.backend", "LaunchOptions::backend, the launcher's start method"),
    ("launch/WorkerEnvironment.cpp", "options.backend", "LaunchOptions::backend, the launcher's start method"),
    ("cli/LaunchCommand.cpp", "value", "--nproc-per-node's own words (auto, cpu), as torchrun's"),
    ("cli/LaunchCommand.cpp", "args.backend", "`dtrain launch --backend`, a flag of the launcher"),
    ("parallel/decentralized/DecentralizedStrategy.cpp", "context_.comm->backend()",
     "the communicator's name of its own backend"),
    ("parallel/pipeline/PipelineStrategy.cpp", "world_->backend()", "the communicator's name of its own backend"),
    ("experiment/ReportRuns.cpp", "wire", "results.json's text, read back for a report"),
    ("run/RunResults.cpp", "value", "the device settings as results.json states them (true/false)"),
    ("experiment/ExperimentFile.cpp", "key", "an experiment file's own keys (base: its base configuration)"),
    ("parallel/decentralized/Graph.cpp", "o.type", "parallel.graph.type's own words (base: the Base-(k+1) graph), not model.size's"),
]


def strip_comments(text):
    """The text with // and /* */ comments blanked, string and character literals kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("\n" * text.count("\n", i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


# The headers whose EnumNames tables name enumerated settings, relative to src/dtrain/, each with the
# folder whose code may compare those names as text (None: no folder may).
SETTINGS_HEADERS = [("config/RunConfig.h", "config")]
STRATEGY_OPTION_HEADERS = "parallel/**/*Options.h"


def tables_of(root, relative):
    """{name: [table, ...]} for every name of every EnumNames table in src/dtrain/<relative>."""
    header = open(os.path.join(root, relative), encoding="utf-8").read()
    names = {}
    for _, table, body in TABLE.findall(header):
        found = re.findall(LITERAL, body)
        if not found:
            raise SystemExit(f"src/dtrain/{relative}: {table} has no names this test can read")
        for name in found:
            names.setdefault(name, []).append(table)
    return names


def setting_names(root):
    """{name: [(header, table, folder exempt or None), ...]} for every enumerated setting's name."""
    headers = list(SETTINGS_HEADERS)
    for path in sorted(glob.glob(os.path.join(root, STRATEGY_OPTION_HEADERS), recursive=True)):
        headers.append((os.path.relpath(path, root), None))
    names = {}
    for relative, exempt in headers:
        tables = tables_of(root, relative)
        if relative == SETTINGS_HEADERS[0][0] and not tables:
            raise SystemExit(f"src/dtrain/{relative}: no util::EnumNames tables found; the test reads them")
        for name, found in tables.items():
            names.setdefault(name, []).extend((relative, table, exempt) for table in found)
    if not any(exempt is None for owners in names.values() for _, _, exempt in owners):
        raise SystemExit(f"src/dtrain/{STRATEGY_OPTION_HEADERS}: no util::EnumNames tables found; the test "
                         "reads the strategies' enumerated options from them")
    return names


def main():
    source = os.path.abspath(sys.argv[1])
    root = os.path.join(source, "src", "dtrain")
    names = setting_names(root)
    problems, used = [], set()
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root)
            if not name.endswith(SOURCES):
                continue
            text = strip_comments(open(path, encoding="utf-8", errors="replace").read())
            for match in COMPARISON.finditer(text):
                operand = match.group(1) or match.group(4)
                literal = match.group(2) if match.group(1) else match.group(3)
                owners = [(header, table) for header, table, exempt in names.get(literal, [])
                          if exempt is None or not relative.startswith(exempt + os.sep)]
                if not owners:
                    continue
                allowed = [i for i, (f, o, _) in enumerate(ALLOWED) if f == relative and o == operand]
                if allowed:
                    used.update(allowed)
                    continue
                line = text.count("\n", 0, match.start()) + 1
                where = ", ".join(f"{table} in src/dtrain/{header}" for header, table in owners)
                problems.append(
                    f'src/dtrain/{relative}:{line}: {operand} compared with "{literal}", a name of an enumerated '
                    f"setting ({where}); compare the enum, or add the place to ALLOWED in "
                    "tests/tree/typed_settings_test.py with the reason it is text"
                )
    for i, (f, o, _) in enumerate(ALLOWED):
        if i not in used:
            problems.append(f"tests/tree/typed_settings_test.py: ALLOWED names {f} comparing {o}, which no "
                            "longer compares a setting's name there; remove the entry")
    for p in problems:
        print(p)
    if problems:
        return 1
    tables = {(header, table) for owners in names.values() for header, table, _ in owners}
    print(f"{len(names)} names of enumerated settings in {len(tables)} tables; no comparison of one where "
          f"it is a setting's name but the {len(ALLOWED)} allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
