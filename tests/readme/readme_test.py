#!/usr/bin/env python3
"""Runs every shell command README.md shows, so that none drifts from the code.

Each fenced ```sh or ```bash block runs as one bash script (set -e) in a scratch folder that holds
links to the checkout's top-level entries and to the build folder as build/, so that its relative
paths work and the runs it makes stay out of the checkout. Commands run as written, with a few
steps: a `dtrain train` (also through a launcher, and scripts/run-main.sh) gets TRAIN_OVERRIDES
appended in place of its own train.max_steps and train.epochs, and `dtrain bench comm` one small
size; a `dtrain experiment` gets the same overrides as --set, a `dtrain bench throughput` one step
without warm-up at one batch size, `dtrain bench data` a small export, bench/precision_compare.sh
STEPS=2; a run folder named by its date (runs/20261122-050233_quickstart, runs/<date>_quickstart)
becomes the newest folder of that name. Blocks run two at a time (DTRAIN_README_JOBS), each in a
folder of its own (a block that builds first, alone): most are one process of one thread on a
two-core host, and the throughput sweep alone is a third of the whole. Marks just above a block's fence:
    <!-- readme-test: skip: REASON -->    the block cannot run here; listed with its reason (required)
    <!-- readme-test: before: COMMAND --> COMMAND runs first (shortened alike), e.g. the training whose
                                          run folder the block resumes; several marks run in order
Fails naming README.md's line of every block that exits non-zero, with the end of its output.
    tests/readme/readme_test.py SOURCE_DIR BUILD_DIR [--list] [--line N]   (--line: only the block at N)
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


def blocks(readme):
    """(line of the fence, language, text, skip reason or None) for every fenced block."""
    lines = open(readme, encoding="utf-8").read().split("\n")
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
            sys.exit(f"README.md:{start}: a readme-test skip mark needs a reason: {skip.group(0)}")
        setup = [m.group(1) for m in map(BEFORE.search, marks) if m]
        text = "\n".join(setup + lines[start + 1:end])
        found.append((start + 1, language, text, skip.group(1) if skip else None))
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


def run_block(source, build, line, text):
    """(line, None or the failure's text, seconds) for one block, run in a folder of its own."""
    folder = scratch(source, build)
    started = time.monotonic()
    try:
        result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", shorten(text)], cwd=folder,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return line, f"README.md:{line}: the block ran longer than {BLOCK_TIMEOUT_S} s:\n{shorten(text)}", \
            time.monotonic() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        tail = "\n".join(result.stdout.rstrip().split("\n")[-30:])
        return line, f"{tail}\nREADME.md:{line}: the block exited {result.returncode}:\n{shorten(text)}", seconds
    return line, None, seconds


def main():
    source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    readme = os.path.join(source, "README.md")
    shell_blocks = [b for b in blocks(readme) if b[1] in ("sh", "bash")]
    if "--line" in sys.argv:
        only = int(sys.argv[sys.argv.index("--line") + 1])
        shell_blocks = [b for b in shell_blocks if b[0] == only]
    to_run = []
    for line, _, text, reason in shell_blocks:
        if reason is not None:
            print(f"README.md:{line}: skipped: {reason}")
        elif "--list" in sys.argv:
            print(f"README.md:{line}: runs:\n{shorten(text)}")
        else:
            to_run.append((line, text))
    if "--list" in sys.argv:
        return
    skipped = len(shell_blocks) - len(to_run)
    started = time.monotonic()
    failures = []

    def report(line, failure, seconds):
        if failure is None:
            print(f"README.md:{line}: ok in {seconds:.1f} s", flush=True)
        else:
            print(f"README.md:{line}: FAILED after {seconds:.1f} s", flush=True)
            failures.append((line, failure))

    for line, text in to_run:
        if BUILDS.search(shorten(text)):
            report(*run_block(source, build, line, text))
    # Each block is a bash script in its own scratch folder; the pool only decides how many run at once.
    with concurrent.futures.ThreadPoolExecutor(max_workers=JOBS) as pool:
        futures = [pool.submit(run_block, source, build, line, text) for line, text in to_run
                   if not BUILDS.search(shorten(text))]
        for future in concurrent.futures.as_completed(futures):
            report(*future.result())
    if failures:
        failures.sort()
        sys.exit("\n\n".join(text.rstrip() for _, text in failures) +
                 f"\nFAIL: {len(failures)} of {len(to_run)} blocks of README.md failed (lines "
                 f"{', '.join(str(line) for line, _ in failures)})")
    print(f"PASS: {len(to_run)} blocks of README.md ran in {time.monotonic() - started:.0f} s, {JOBS} at a time, "
          f"{skipped} skipped (reasons above)")


if __name__ == "__main__":
    main()
