"""The user docs hold together: every relative link and image in them points at a file that
exists (and an anchor at a heading there), and docs/ reads as a reference, not a diary.

Dated runs and raw outputs belong under benchmarks/results/ (whose README is checked for links
too); docs/ names no kls issue numbers, runs by ordinal, commit hashes or times of day.
PyTorch sources cited by number ("pytorch/pytorch #150360", "PR #107931") are fine.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _link_sources() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "vscode-extension" / "README.md"]
    files += sorted(DOCS.rglob("*.md"))
    files.append(ROOT / "benchmarks" / "results" / "README.md")
    return files


FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target); the text may hold one level of brackets (an image in a link).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)))
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading and not fenced:
            slug = _slug(heading.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        found += [(number, m.group(1)) for m in LINK.finditer(line)]
    return found


@pytest.mark.parametrize("doc", _link_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_existing_files_and_headings(doc: Path) -> None:
    assert doc.is_file(), f"{doc.relative_to(ROOT)} is missing"
    broken = []
    for number, target in _links(doc):
        if SCHEME.match(target):
            continue  # https:, mailto:, vscode: ...
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        where = f"{doc.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor.lower() not in _anchors(dest):
            broken.append(f"{where} (no heading #{anchor} in {dest.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)


# The diary style: "issue 12", "(issue: core)", "run 5", "runs 3 and 4", "commit adb5f38",
# a bare abbreviated hash, "13:48 UTC", "third session", "this round".
DIARY = [
    (re.compile(r"\bissues? #?\d+\b", re.I), "a kls issue number"),
    (re.compile(r"\(issue:", re.I), "an issue label"),
    (re.compile(r"\bruns? \d+\b", re.I), "a run by its ordinal"),
    (re.compile(r"\bcommits? [0-9a-f]{7,40}\b", re.I), "a commit hash"),
    (re.compile(r"(?<![\w#/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,12}(?![\w-])"), "hash"),
    (re.compile(r"\b[0-2]?\d:[0-5]\d(?:[–-][0-2]?\d:[0-5]\d)?\s*(?:UTC|h\b)"), "a time of day"),
    (re.compile(r"\b(?:first|second|third|this|previous) (?:session|round)\b", re.I), "session"),
]


def _diary_hits(text: str) -> list[str]:
    hits = []
    for number, line in _prose_lines(text):
        if line.lstrip().startswith("|"):
            # Tables may number repeated measurements ("| run 1 | run 2 |"); check the rest.
            line = re.sub(r"\bruns? \d+\b", "", line, flags=re.I)
        for pattern, what in DIARY:
            for m in pattern.finditer(line):
                hits.append(f"{number}: {what}: {m.group(0)!r}")
    return hits


@pytest.mark.parametrize("doc", sorted(DOCS.rglob("*.md")), ids=lambda p: p.name)
def test_docs_read_as_references_not_diaries(doc: Path) -> None:
    hits = _diary_hits(doc.read_text(encoding="utf-8"))
    assert not hits, (
        f"{doc.relative_to(ROOT)} reads as a diary (dated runs go to benchmarks/results/):\n"
        + "\n".join(hits)
    )


def test_the_diary_patterns_catch_the_diary_style_and_spare_pytorch_sources() -> None:
    diary = [
        "The rebuild (issue 12): before and after",
        "## `kls check` (issue: core)",
        "run 5 flushed 2×L2 before each launch",
        "took the 4096³ row from +3.07 % to +0.49 % (runs 5 → 6)",
        "*Before* = commit adb5f38, with the current protocol guard",
        "main at f80c1da (later commits touch docs only)",
        "2026-11-30 13:48–13:49 UTC",
        "**Third session (2026-11-30)**",
    ]
    for line in diary:
        assert _diary_hits(line), line
    sources = [
        "as Inductor's maintainers report it (pytorch/pytorch #150360, #153335, #148122)",
        "the helpers that PR #107931 introduced",
        "| | run 1 | run 2 | run 3 | target |",
        "the sha256 of Inductor's render, `deadbeef1234`",
        "`kls serve --tcp 127.0.0.1:2087` and `[0:2147483647]`",
        "three runs of the script, 300 renders each, 2000 samples",
    ]
    for line in sources:
        assert not _diary_hits(line), line
