"""Everything in the repository is ours: no tracked file shares a run of six or more
consecutive non-blank lines (whitespace-normalised) with torch's `torch/_inductor` sources,
read from the torch source at test time (CI: the torch 2.11.0 wheel). A window made mostly of
facts (`#include` lines, bare `{{placeholders}}`, lone brackets, `#endif`/`#else`) does not
count: which headers a kernel includes is a fact, not prose. The same rule as the project's
before-stop hook."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import ROOT
from tests.upstream import needs_torch_source, require_torch_source

RUN = 6
_FACT = re.compile(r"^(#include .*|\{\{[^{}]*\}\}|[{}();,]*|#endif|#else)$")
_SKIPPED_SUFFIXES = {".png", ".svg", ".vsix", ".whl", ".gz", ".csv"}


def _normalised(text: str) -> list[str]:
    return [
        line for line in (re.sub(r"\s+", " ", raw).strip() for raw in text.splitlines()) if line
    ]


def windows(text: str) -> dict[tuple[str, ...], int]:
    """Each counted window of RUN non-blank lines, with the index of its first line."""
    lines = _normalised(text)
    found: dict[tuple[str, ...], int] = {}
    for i in range(len(lines) - RUN + 1):
        window = tuple(lines[i : i + RUN])
        if sum(not _FACT.match(line) for line in window) >= 3:
            found.setdefault(window, i)
    return found


def upstream_windows(inductor: Path) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for path in inductor.rglob("*"):
        if path.suffix in (".py", ".jinja") and path.is_file():
            out.update(windows(path.read_text(encoding="utf-8", errors="replace")))
    return out


def test_the_rule_sees_a_copied_run_and_not_an_include_list() -> None:
    prose = "\n".join(f"int step_{i} = {i};" for i in range(8))
    includes = "\n".join(f"#include <h{i}.h>" for i in range(8))
    assert windows(prose) and not windows(includes)
    assert not set(windows(prose + "\n")) - set(windows("\n\n" + prose))  # blank lines ignored


@needs_torch_source
def test_no_file_shares_a_run_with_inductor() -> None:
    upstream = upstream_windows(require_torch_source().inductor)
    assert len(upstream) > 100_000  # the whole of torch/_inductor was read
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    shared: dict[str, int] = {}
    for name in tracked:
        path = ROOT / name
        if path.suffix in _SKIPPED_SUFFIXES or not path.is_file():
            continue
        if path.stat().st_size > 3_000_000:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        count = len(set(windows(text)) & upstream)
        if count:
            shared[name] = count
    assert shared == {}, f"files sharing {RUN}-line runs with torch/_inductor: {shared}"
