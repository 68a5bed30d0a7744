"""The repository stands on its own: every relative link in its markdown resolves inside it, and no
tracked file names a path that only exists on some machine (a work tree, a home directory, a
scratch file in /tmp) or a document outside the repository.

Someone who clones the project must be able to open everything the project points to.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Directories that hold what a run leaves behind, never sources (used when git is not there).
UNTRACKED_DIRS = {".git", ".venv", "data", "store", "tmp", "__pycache__", ".hypothesis", ".pytest_cache"}
BINARY_SUFFIXES = {".png", ".jpg", ".gif", ".zst", ".gz", ".pyc"}
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...
# Built from parts so this file does not name them itself.
MACHINE_PATHS = re.compile(
    r"(?<![\w.~-])(?:/" + "work/|/" + "tmp/|/" + "home/|/" + "root/|/" + "Users/)"
    + r"|\.\./" + "shared" + r"\b"
)
# Documents that live outside the repository (the original contract, its seeds, design and research
# notes): the repository cites docs/spec.md and its own pages instead.
OUTSIDE_DOCUMENTS = re.compile(r"\b(?:" + "SPEC" + r"\.md|" + "DESIGN" + r"\.md|" + "seeds" + r"/|" + "research" + r"/pysyncobj)")


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return [p for p in ROOT.rglob("*") if p.is_file()
                and not UNTRACKED_DIRS & set(p.relative_to(ROOT).parts) and ".egg-info" not in str(p)]
    return [ROOT / name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


def markdown_files() -> list[Path]:
    return sorted(p for p in tracked_files() if p.suffix == ".md")


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks: a path in a code sample is not a link."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"`[^`]*`", "", line)


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file."""
    anchors = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def broken_links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    problems = []
    for number, line in prose_lines(text):
        # Inline code was dropped above; a link's text may hold code, so read links from the raw line.
        raw = text.splitlines()[number - 1]
        for target in LINK.findall(raw):
            if EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / unquote(file_part)).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}:{number}: {target}"
            if ROOT not in resolved.parents and resolved != ROOT:
                problems.append(f"{where} (leaves the repository)")
            elif not resolved.exists():
                problems.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in heading_anchors(resolved):
                problems.append(f"{where} (no heading with this anchor)")
    return problems


def test_the_link_pattern_reads_links_and_skips_images_and_code():
    assert LINK.findall("see [the spec](docs/spec.md#2-timers) and [`x`](a.md)") == ["docs/spec.md#2-timers", "a.md"]
    assert LINK.findall("![plot](p.png)") == []
    assert list(prose_lines("a\n```\n[x](nowhere.md)\n```\nb")) == [(1, "a"), (5, "b")]


def test_a_broken_link_is_reported(tmp_path, monkeypatch):
    page = ROOT / "docs" / "spec.md"
    assert broken_links(page) == []
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: "[gone](missing.md) [up](../../x.md)")
    assert [p.rsplit(" ", 3)[-3:] for p in broken_links(page)] == [["(no", "such", "file)"],
                                                                   ["(leaves", "the", "repository)"]]


def test_anchors_follow_github():
    assert {"2-timers", "durability-exactly"} <= heading_anchors(ROOT / "docs" / "spec.md") | heading_anchors(
        ROOT / "README.md")


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(path):
    assert broken_links(path) == []


def test_no_tracked_file_names_a_machine_path_or_a_document_outside_the_repository():
    found = []
    for path in tracked_files():
        if path.suffix in BINARY_SUFFIXES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATHS.search(line) or OUTSIDE_DOCUMENTS.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert found == []


def test_the_machine_path_pattern():
    assert MACHINE_PATHS.search("see /" + "work/main/x") and MACHINE_PATHS.search("(../" + "shared/" + "SPEC" + ".md)")
    assert MACHINE_PATHS.search("/" + "tmp/ack_mem.py")
    assert not MACHINE_PATHS.search("bench/results/tmp/ (git-ignored)")
    assert OUTSIDE_DOCUMENTS.search("(" + "seeds" + "/timer-routes.md)") and not OUTSIDE_DOCUMENTS.search("docs/spec.md")
