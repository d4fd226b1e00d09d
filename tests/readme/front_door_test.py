#!/usr/bin/env python3
"""Keeps README.md a short front door to the guides in docs/.

Fails, naming FILE:LINE where there is one, when
- README.md has 200 lines or more (a topic that needs more belongs in a guide of docs/);
- a guide, docs/*.md, is not linked from README.md (nobody finds a page that the front door hides);
- a relative link of README.md or of a guide reaches no file, or names a heading (#anchor) that the
  Markdown file it reaches does not have (anchors as GitHub makes them from headings).
Links inside fenced code blocks and `code spans` are not links; http(s) and mailto addresses are
not checked (this test needs no network and no build).
    tests/readme/front_door_test.py SOURCE_DIR
"""
import os
import re
import sys

README_MAX_LINES = 200
# [text](target) and ![alt](target), the target up to a space (a title may follow) or ')'.
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target, a reference-style definition.
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")


def prose_lines(path):
    """(line number, text) of every line outside fenced code blocks, code spans blanked."""
    inside = False
    for number, line in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading: lower case, links and code marks dropped, punctuation removed,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path):
    """Every anchor the headings of a Markdown file make (a repeated heading gets -1, -2, ...)."""
    seen, found = {}, set()
    inside = False
    for line in open(path, encoding="utf-8").read().split("\n"):
        if FENCE.match(line):
            inside = not inside
            continue
        heading = HEADING.match(line)
        if inside or not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path):
    """(line number, target) of every link of a Markdown file."""
    for number, line in prose_lines(path):
        for match in INLINE_LINK.finditer(line):
            yield number, match.group(1)
        reference = REFERENCE_LINK.match(line)
        if reference:
            yield number, reference.group(1)


def check(source):
    """Every failure, one line each."""
    failures = []
    readme = os.path.join(source, "README.md")
    lines = open(readme, encoding="utf-8").read().rstrip("\n").count("\n") + 1
    if lines >= README_MAX_LINES:
        failures.append(f"README.md: {lines} lines, but the front door must stay under {README_MAX_LINES}: "
                        f"move a section into a guide in docs/ and link it from README.md's table")
    docs = os.path.join(source, "docs")
    guides = sorted(f"docs/{f}" for f in os.listdir(docs) if f.endswith(".md")) if os.path.isdir(docs) else []
    linked_from_readme = set()
    for name in ["README.md"] + guides:
        path = os.path.join(source, name)
        for number, target in links(path):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            reached = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            shown = os.path.relpath(reached, source)
            if not os.path.exists(reached):
                failures.append(f"{name}:{number}: the link {target} reaches {shown}, which does not exist")
                continue
            if name == "README.md":
                linked_from_readme.add(shown)
            if anchor and reached.endswith(".md") and anchor not in anchors(reached):
                failures.append(f"{name}:{number}: the link {target}: {shown} has no heading whose anchor is "
                                f"#{anchor}")
    for guide in guides:
        if guide not in linked_from_readme:
            failures.append(f"README.md: no link to the guide {guide}; add it to README.md's table or its "
                            f"next steps")
    return failures


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    failures = check(os.path.abspath(sys.argv[1]))
    if failures:
        sys.exit("\n".join(failures) + f"\nFAIL: {len(failures)} problems with README.md and docs/")
    print("PASS: README.md is under 200 lines, links every guide in docs/, and every relative link reaches "
          "its file and heading")


if __name__ == "__main__":
    main()
