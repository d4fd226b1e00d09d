#!/usr/bin/env python3
"""Runs every shell command README.md and the guides in docs/ show, so that none drifts from the code.

Each fenced ```sh or ```bash block of README.md and of every docs/*.md runs as one bash script
(set -e) in a scratch folder that holds links to the checkout's top-level entries and to the build
folder as build/, so that its relative paths work (a guide's commands, like the README's, run from
the checkout's root) and the runs it makes stay out of the checkout. Commands run as written, with
a few steps: a `dtrain train` (also through a launcher, and scripts/run-main.sh) gets
TRAIN_OVERRIDES appended in place of its own train.max_steps and train.epochs, and `dtrain bench
comm` one small size; a `dtrain experiment` gets the same overrides as --set, a `dtrain bench
throughput` one step without warm-up at one batch size, `dtrain bench data` a small export,
bench/precision_compare.sh STEPS=2; a run folder named by its date (runs/20261122-050233_quickstart,
runs/<date>_quickstart) becomes the newest folder of that name. Blocks run two at a time
(DTRAIN_README_JOBS), each in a folder of its own (a block that builds runs first, alone, before
the blocks of every file): most are one process of one thread on a two-core host, and the
throughput sweep alone is a third of the whole. Marks just above a block's fence:
    <!-- readme-test: skip: REASON -->    the block cannot run here; listed with its reason (required)
    <!-- readme-test: before: COMMAND --> COMMAND runs first (shortened alike), e.g. the training whose
                                          run folder the block resumes; several marks run in order
A block is named by its file and the line of its fence (README.md:14, docs/dad.md:3): progress names
it so, and a block that exits non-zero fails the test, named so, with the end of its output.
    tests/readme/readme_test.py SOURCE_DIR BUILD_DIR [--list] [--line FILE:N | --line N]
--list prints what each block runs (shortened) and each skip with its reason, and runs nothing;
--line runs only the block whose fence is at FILE:N (a bare N is README.md's line N).
"""
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

TRAIN_OVERRIDES = "train.max_steps=2 data.subset_size=512 data.test_subset_size=256 train.checkpoint_every_epochs=0"
# An experiment's decentralized runs split the data over up to 10 graph nodes of several batches each.
EXPERIMENT_OVERRIDES = TRAIN_OVERRIDES.replace("data.subset_size=512", "data.subset_size=8192")
BENCH_COMM = "--sizes 4K --iters 2 --warmup 1"
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s*:?\s*(.*?)\s*-->")
BEFORE = re.compile(r"<!--\s*readme-test:\s*before\s*:\s*(.*?)\s*-->")
DATED = re.compile(r"(\S*?)(?:<date>|\d{8}-\d{6})_([\w.-]+)")
# A block's limit; a sanitized tree (scripts/sanitize.sh) runs several times slower and sets more.
BLOCK_TIMEOUT_S = int(os.environ.get("DTRAIN_README_BLOCK_TIMEOUT_S", "300"))
# Blocks run side by side; 1 runs them one after another.
JOBS = max(1, int(os.environ.get("DTRAIN_README_JOBS", "2")))
# A block that builds (scripts/run-main.sh builds before it trains) may relink the binaries the
# others run: it runs first, alone.
BUILDS = re.compile(r"scripts/(run-main|build|run-tests)\.sh|cmake --build")


def documents(source):
    """README.md and the guides in docs/, as paths relative to SOURCE_DIR, README.md first."""
    folder = os.path.join(source, "docs")
    guides = sorted(f for f in os.listdir(folder) if f.endswith(".md")) if os.path.isdir(folder) else []
    return ["README.md"] + [f"docs/{f}" for f in guides]


def blocks(source, name):
    """("FILE:LINE" of the fence, language, text, skip reason or None) for every fenced block of one file."""
    lines = open(os.path.join(source, name), encoding="utf-8").read().split("\n")
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, language = i, m.group(1)
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        marks, k = [], start - 1
        while k >= 0 and "readme-test:" in lines[k]:
            marks.insert(0, lines[k])
            k -= 1
        skip = next((m for m in map(SKIP.search, marks) if m), None)
        if skip and not skip.group(1):
            sys.exit(f"{name}:{start + 1}: a readme-test skip mark needs a reason: {skip.group(0)}")
        setup = [m.group(1) for m in map(BEFORE.search, marks) if m]
        text = "\n".join(setup + lines[start + 1:end])
        found.append((f"{name}:{start + 1}", language, text, skip.group(1) if skip else None))
        i = end + 1
    return found


def strip_comment(line):
    """The line without a trailing shell comment (a '#' after whitespace, outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line


def shorten(script):
    """The block with every training made a few steps long."""
    logical, pending = [], ""
    for line in script.split("\n"):
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    out = []
    for line in logical:
        line = DATED.sub(lambda m: f'"$(ls -d {m.group(1)}*_{m.group(2)} | tail -n 1)"', line)
        if re.search(r"dtrain train\b|scripts/run-main\.sh", line):
            line = re.sub(r"\s(train\.max_steps|train\.epochs)=\S+", "", strip_comment(line)) + " " + TRAIN_OVERRIDES
        elif re.search(r"dtrain experiment\b", line):
            line = strip_comment(line) + "".join(f" --set {o}" for o in EXPERIMENT_OVERRIDES.split())
        elif re.search(r"dtrain bench comm\b", line):
            line = strip_comment(line) + " " + BENCH_COMM
        elif re.search(r"dtrain bench throughput\b", line):
            line = re.sub(r"--steps \S+", "--steps 1", re.sub(r"--warmup \S+", "--warmup 0", strip_comment(line)))
            line = re.sub(r"--batches \S+", "--batches 4", line)
        elif re.search(r"dtrain bench data\b", line):
            line = re.sub(r"--export \S+", "--export 64", strip_comment(line)).replace("/tmp/", "tmp-")
        elif re.search(r"bench/precision_compare\.sh", line):
            line = "STEPS=2 " + strip_comment(line)
        out.append(line)
    return "\n".join(out) + "\n"


def scratch(source, build):
    """A folder with links to the checkout's entries and build/ to the build folder."""
    folder = tempfile.mkdtemp(prefix="dtrain-readme-test-")
    for entry in os.listdir(source):
        if entry in ("build", ".git", "runs", "logs"):
            continue
        os.symlink(os.path.join(source, entry), os.path.join(folder, entry))
    os.symlink(build, os.path.join(folder, "build"))
    return folder


def run_block(source, build, where, text):
    """(FILE:LINE, None or the failure's text, seconds) for one block, run in a folder of its own."""
    folder = scratch(source, build)
    started = time.monotonic()
    try:
        result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", shorten(text)], cwd=folder,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return where, f"{where}: the block ran longer than {BLOCK_TIMEOUT_S} s:\n{shorten(text)}", \
            time.monotonic() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        tail = "\n".join(result.stdout.rstrip().split("\n")[-30:])
        return where, f"{tail}\n{where}: the block exited {result.returncode}:\n{shorten(text)}", seconds
    return where, None, seconds


def block_order(where):
    """A key that sorts FILE:LINE as the blocks appear: README.md first, then the guides, by line."""
    name, line = where.rsplit(":", 1)
    return (name != "README.md", name, int(line))


def main():
    source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    shell_blocks = [b for name in documents(source) for b in blocks(source, name) if b[1] in ("sh", "bash")]
    if "--line" in sys.argv:
        only = sys.argv[sys.argv.index("--line") + 1]
        only = only if ":" in only else f"README.md:{only}"
        shell_blocks = [b for b in shell_blocks if b[0] == only]
        if not shell_blocks:
            sys.exit(f"{only}: no ```sh or ```bash block has its fence on that line (--list shows them)")
    to_run = []
    for where, _, text, reason in shell_blocks:
        if reason is not None:
            print(f"{where}: skipped: {reason}")
        elif "--list" in sys.argv:
            print(f"{where}: runs:\n{shorten(text)}")
        else:
            to_run.append((where, text))
    if "--list" in sys.argv:
        return
    skipped = len(shell_blocks) - len(to_run)
    files = len({where.rsplit(":", 1)[0] for where, _, _, _ in shell_blocks})
    started = time.monotonic()
    failures = []

    def report(where, failure, seconds):
        if failure is None:
            print(f"{where}: ok in {seconds:.1f} s", flush=True)
        else:
            print(f"{where}: FAILED after {seconds:.1f} s", flush=True)
            failures.append((where, failure))

    for where, text in to_run:
        if BUILDS.search(shorten(text)):
            report(*run_block(source, build, where, text))
    # Each block is a bash script in its own scratch folder; the pool only decides how many run at once.
    with concurrent.futures.ThreadPoolExecutor(max_workers=JOBS) as pool:
        futures = [pool.submit(run_block, source, build, where, text) for where, text in to_run
                   if not BUILDS.search(shorten(text))]
        for future in concurrent.futures.as_completed(futures):
            report(*future.result())
    if failures:
        failures.sort(key=lambda failure: block_order(failure[0]))
        sys.exit("\n\n".join(text.rstrip() for _, text in failures) +
                 f"\nFAIL: {len(failures)} of {len(to_run)} blocks failed "
                 f"({', '.join(where for where, _ in failures)})")
    print(f"PASS: {len(to_run)} blocks of {files} files (README.md and docs/) ran in "
          f"{time.monotonic() - started:.0f} s, {JOBS} at a time, {skipped} skipped (reasons above)")


if __name__ == "__main__":
    main()
