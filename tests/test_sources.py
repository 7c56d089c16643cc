"""Sources inside the repository (issue 44 item 3): no tracked file points to reference
documents a cloner does not have (the authors' notes outside the repository), and every
``docs/sources.md#<anchor>`` cited anywhere names an entry of ``docs/sources.md``."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "docs" / "sources.md"

# The forbidden spellings are assembled from pieces so that this file does not match itself.
_SHARED = "shared" + "/"
_SPEC = "spec"
_S = "§"  # the section sign
_MD = ".md"
FORBIDDEN = {
    "path to the reference notes": re.compile(re.escape(_SHARED) + "(?:" + _SPEC + "|paper)\\b"),
    "section of the reference notes": re.compile(r"\b" + _SPEC + r"\s*§"),
    "named reference notes": re.compile(r"\b" + _SPEC + r"\s+`*(?:attacks|defenses)\b"),
    "reference notes file": re.compile(r"\b(?:attacks|defenses)" + re.escape(_MD) + r"\b"),
    "numbered section of the reference notes": re.compile(
        r"\(" + _SPEC + r"\s+\d|\b" + _SPEC + r"\s+\d+\.\d"),
    # the paper's sections are whole numbers and its appendices letters (A.3): a section sign
    # before a dotted number, "8 item 4" or "7b" can only point into the reference notes
    "bare section of the reference notes": re.compile(_S + r"\s*(?:\d+\.\d|\d+\s+items?\b|7b)"),
}
#: a citation of entries: ``docs/sources.md#<anchor>`` (anywhere) or ``sources.md#<anchor>``, maybe
#: followed by more anchors of the same page: ``docs/sources.md#ppa, #if-gmi``
CITATION = re.compile(r"(?:docs/)?sources\.md#([A-Za-z0-9_-]+)((?:,\s*#[A-Za-z0-9_-]+)*)")
#: a link inside docs/sources.md to one of its own entries: ``](#anchor)``
SELF_LINK = re.compile(r"\]\(#([A-Za-z0-9_-]+)\)")


def tracked_files() -> list[Path]:
    """The files git tracks (what a cloner gets), text files only."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # not a git checkout
        pytest.skip(f"git ls-files failed in {ROOT}: {exc}")
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file():
            head = path.read_bytes()[:8192]
            if b"\0" not in head:
                files.append(path)
    return files


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as '-'."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Anchors of every heading (duplicates get GitHub's ``-1``, ``-2`` suffixes)."""
    seen: Counter[str] = Counter()
    out = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6}\s+(.*)", line)
        if m:
            base = slug(m.group(1))
            out.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return out


def test_slug_and_anchors() -> None:
    assert slug("Seeds and splits") == "seeds-and-splits"
    assert slug("TL-DMI") == "tl-dmi"
    assert slug("Real images of the distances") == "real-images-of-the-distances"
    assert anchors("## PPA\n### PPA\n```\n# not a heading\n```\n") == {"ppa", "ppa-1"}


def test_patterns_catch_the_old_references() -> None:
    """Each spelling the old comments used is caught (the patterns are not vacuous)."""
    old = [f"(paper A.1; {_SPEC} {_S}2.2)", f"../{_SHARED}{_SPEC}/defenses{_MD} section X",
           f"/work/{_SHARED}paper/paper{_MD}", f"({_SPEC} attacks {_S}5.2)",
           f"{_SPEC} ``attacks{_MD}`` {_S}6", f"({_SPEC} defenses{_MD} 3.2)",
           f"DenseNet, {_SPEC} 2.6)", f"batches ({_SPEC} 4)", f"identity losses ({_S}1.3)",
           f"({_S}8 item 4)", f"(attacks{_MD})"]
    for text in old:
        assert any(p.search(text) for p in FORBIDDEN.values()), text
    fine = ["fit_spec(df, spec)", "the spec's sample", "cost_of_privacy.spec", f"paper {_S}3, App. A.3",
            "docs/sources.md#mid", "importlib.util.spec_from_file_location"]
    for text in fine:
        assert not any(p.search(text) for p in FORBIDDEN.values()), text


def test_no_tracked_file_refers_outside_the_repository() -> None:
    bad = []
    for path in tracked_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for what, pattern in FORBIDDEN.items():  # on the whole text: a reference may span lines
            for m in pattern.finditer(text):
                lineno = text.count("\n", 0, m.start()) + 1
                line = text.splitlines()[lineno - 1]
                bad.append(f"{path.relative_to(ROOT)}:{lineno}: {what}: {line.strip()[:120]}")
    assert not bad, ("references a cloner cannot follow (cite the paper's section or an entry "
                     "of docs/sources.md instead):\n" + "\n".join(bad))


def test_every_cited_entry_exists() -> None:
    known = anchors(SOURCES.read_text(encoding="utf-8"))
    missing = []
    for path in tracked_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        cited = [a for first, more in CITATION.findall(text)
                 for a in [first, *re.findall(r"#([A-Za-z0-9_-]+)", more)]]
        if path == SOURCES:
            cited += SELF_LINK.findall(text)
        missing += [f"{path.relative_to(ROOT)}: #{a}" for a in cited if a not in known]
    assert not missing, "citations of entries docs/sources.md does not have:\n" + "\n".join(missing)


def test_sources_entries_name_an_origin() -> None:
    """Each entry (### heading) names where its facts come from: the paper, a repository
    (a short name of the origin table or an owner/name), a file in backticks, or a web page."""
    text = SOURCES.read_text(encoding="utf-8")
    entries = re.split(r"^### ", text, flags=re.M)[1:]
    assert len(entries) >= 30, "docs/sources.md lost its entries"
    for entry in entries:
        title, _, body = entry.partition("\n")
        assert re.search(r"paper|`[^`]+`|https?://", body), f"entry '{title}' names no origin"
