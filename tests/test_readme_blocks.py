"""atat.lab.readme_blocks: the README's quoted tables are refreshed from a run's files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atat.lab.readme_blocks import BlockError, find_blocks, main, refresh

ROOT = Path(__file__).resolve().parents[1]

DOC = """# Results

Run of 2026-12-04.

<!-- from results/tables/claims.md -->
| old | table |
<!-- end results/tables/claims.md -->

Prose in between stays.

<!-- from results/tables/table21.md -->
<!-- end results/tables/table21.md -->
tail
"""


@pytest.fixture
def run(tmp_path: Path) -> Path:
    tables = tmp_path / "results" / "tables"
    tables.mkdir(parents=True)
    (tables / "claims.md").write_text("Caption.\n\n| claim | verdict |\n|---|---|\n| a | b |\n")
    (tables / "table21.md").write_text("| x |\n|---|\n| 1 |\n\n\n")
    return tmp_path


def test_refresh_replaces_each_block_with_its_file_and_keeps_the_prose(run: Path) -> None:
    new, changed = refresh(DOC, run)
    assert changed == ["results/tables/claims.md", "results/tables/table21.md"]
    assert "| old | table |" not in new
    assert ("<!-- from results/tables/claims.md -->\n\nCaption.\n\n| claim | verdict |\n|---|---|\n"
            "| a | b |\n\n<!-- end results/tables/claims.md -->") in new
    assert "<!-- from results/tables/table21.md -->\n\n| x |\n|---|\n| 1 |\n\n<!-- end" in new
    assert new.startswith("# Results\n\nRun of 2026-12-04.\n\n")
    assert "\n\nProse in between stays.\n\n" in new and new.endswith("-->\ntail\n")


def test_refresh_is_idempotent(run: Path) -> None:
    once, _ = refresh(DOC, run)
    twice, changed = refresh(once, run)
    assert twice == once and changed == []


def test_check_mode_reports_a_stale_block_and_writes_nothing(run: Path, capsys) -> None:
    readme = run / "README.md"
    readme.write_text(DOC)
    assert main([str(readme), "--root", str(run), "--check"]) == 1
    assert readme.read_text() == DOC
    assert "the block of results/tables/claims.md differs" in capsys.readouterr().out
    assert main([str(readme), "--root", str(run)]) == 0
    assert main([str(readme), "--root", str(run), "--check"]) == 0
    assert "2 of 2 blocks match" in capsys.readouterr().out


def test_a_block_of_a_file_the_run_lacks_is_an_error_naming_it(run: Path, capsys) -> None:
    (run / "results" / "tables" / "table21.md").unlink()
    with pytest.raises(BlockError, match=r"results/tables/table21.md \(line 11\)"):
        refresh(DOC, run)
    readme = run / "README.md"
    readme.write_text(DOC)
    assert main([str(readme), "--root", str(run)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert readme.read_text() == DOC


@pytest.mark.parametrize("text, message", [
    ("<!-- from a.md -->\nx\n", r"README.md:1: the block of a.md has no '<!-- end a.md -->'"),
    ("<!-- end a.md -->\n", r"README.md:1: '<!-- end a.md -->' closes no open block"),
    ("<!-- from a.md -->\n<!-- end b.md -->\n", r"closes no open block \(open: a.md, line 1\)"),
    ("<!-- from a.md -->\n<!-- from b.md -->\n", r"README.md:2: block of b.md opens inside"),
    ("<!-- from a.md -->\n<!-- end a.md -->\n<!-- from a.md -->\n<!-- end a.md -->\n",
     r"README.md:3: a.md is quoted twice"),
])
def test_malformed_markers_are_errors_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(BlockError, match=message):
        find_blocks(text)


def test_the_miniature_page_quotes_only_files_the_demo_builds() -> None:
    """Each block of docs/miniature.md (the page ``make readme-tables`` refreshes) names a
    target of ``make demo`` (the recorded targets of the demo config), so a refresh from a demo
    run can fill every block; the README quotes none (one home for the run's tables)."""
    blocks = find_blocks((ROOT / "docs" / "miniature.md").read_text(encoding="utf-8"),
                         "docs/miniature.md")
    assert blocks, "docs/miniature.md quotes no generated table"
    assert find_blocks((ROOT / "README.md").read_text(encoding="utf-8")) == []
    assert "atat.lab.readme_blocks docs/miniature.md" in (ROOT / "Makefile").read_text()
    demo_targets = set(json.loads((ROOT / "tests/data/all_targets.json").read_text())
                       ["config.yaml+demo.yaml"])
    assert [b.path for b in blocks if b.path not in demo_targets] == []
