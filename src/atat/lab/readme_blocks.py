"""Generated tables quoted in the README, refreshed from a run instead of copied by hand.

A block of the README between two markers is the verbatim content of a file the workflow
wrote::

    <!-- from results/tables/claims.md -->
    ...the file's text...
    <!-- end results/tables/claims.md -->

``python -m atat.lab.readme_blocks README.md --root <run dir>`` replaces every block's content
with the file's current text under ``--root`` (a worktree that ran ``make demo``; default the
working directory), so a README section quoting a run is that run's output, not a copy that
drifts; ``--check`` only reports the blocks whose content differs (exit status 1), and
changes nothing. The prose around the blocks (the run's date, commit and host, and what the
numbers mean) stays the author's. A marker naming a missing file, a block without its end
marker or a second block of the same file is an error naming the README line.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from atat.base import io

BEGIN = re.compile(r"^<!-- from (?P<path>\S+) -->$")
END = re.compile(r"^<!-- end (?P<path>\S+) -->$")


class BlockError(ValueError):
    """A README's markers are malformed, or a block names a file the run did not write."""


@dataclass(frozen=True)
class Block:
    path: str       # the quoted file, relative to the run's root
    begin: int      # 0-based index of the begin marker's line
    end: int        # 0-based index of the end marker's line

    def content(self, lines: Sequence[str]) -> str:
        return "".join(lines[self.begin + 1:self.end])


def find_blocks(text: str, source: str = "README.md") -> list[Block]:
    """The quoted blocks of ``text`` in order; ``source`` names the file in errors."""
    blocks: list[Block] = []
    seen: set[str] = set()
    open_path: str | None = None
    open_line = 0
    for i, line in enumerate(text.splitlines()):
        stripped = line.strip()
        begin, end = BEGIN.match(stripped), END.match(stripped)
        if begin:
            if open_path is not None:
                raise BlockError(f"{source}:{i + 1}: block of {begin['path']} opens inside the "
                                 f"block of {open_path} (line {open_line + 1}); close it first "
                                 f"with '<!-- end {open_path} -->'")
            open_path, open_line = begin["path"], i
        elif end:
            if open_path is None or end["path"] != open_path:
                raise BlockError(f"{source}:{i + 1}: '<!-- end {end['path']} -->' closes no open "
                                 f"block" + (f" (open: {open_path}, line {open_line + 1})"
                                             if open_path else ""))
            if open_path in seen:
                raise BlockError(f"{source}:{open_line + 1}: {open_path} is quoted twice; quote "
                                 f"each file once and refer to it elsewhere")
            seen.add(open_path)
            blocks.append(Block(open_path, open_line, i))
            open_path = None
    if open_path is not None:
        raise BlockError(f"{source}:{open_line + 1}: the block of {open_path} has no "
                         f"'<!-- end {open_path} -->' line")
    return blocks


def _quoted(path: Path) -> str:
    """A file's text as a block holds it: a blank line on each side (markdown needs one
    around a table), trailing whitespace of the file dropped."""
    return "\n" + path.read_text(encoding="utf-8").rstrip() + "\n\n"


def refresh(text: str, root: str | Path, source: str = "README.md") -> tuple[str, list[str]]:
    """``text`` with every block's content replaced by its file under ``root``, and the
    paths of the blocks whose content changed."""
    lines = text.splitlines(keepends=True)
    blocks = find_blocks(text, source)
    missing = [b for b in blocks if not (Path(root) / b.path).is_file()]
    if missing:
        listed = ", ".join(f"{b.path} (line {b.begin + 1})" for b in missing)
        raise BlockError(f"{source}: no such file under {root}: {listed}; run the workflow "
                         f"there first (make demo), or point --root at the run's directory")
    out: list[str] = []
    changed: list[str] = []
    pos = 0
    for b in blocks:
        new = _quoted(Path(root) / b.path)
        if b.content(lines) != new:
            changed.append(b.path)
        out.extend(lines[pos:b.begin + 1])
        out.append(new)
        pos = b.end
    out.extend(lines[pos:])
    return "".join(out), changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("readme", nargs="?", default="README.md")
    parser.add_argument("--root", default=".",
                        help="the directory the markers' paths are relative to (a run's "
                             "worktree; default: the working directory)")
    parser.add_argument("--check", action="store_true",
                        help="report the blocks that differ from the run's files and exit 1; "
                             "write nothing")
    args = parser.parse_args(argv)
    text = Path(args.readme).read_text(encoding="utf-8")
    try:
        new, changed = refresh(text, args.root, args.readme)
    except BlockError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n = len(find_blocks(text, args.readme))
    if args.check:
        for path in changed:
            print(f"{args.readme}: the block of {path} differs from {Path(args.root) / path}")
        print(f"{n - len(changed)} of {n} blocks match the run under {args.root}")
        return 1 if changed else 0
    if changed:
        io.write_text(args.readme, new)
    print(f"{args.readme}: {len(changed)} of {n} blocks refreshed from {args.root}"
          + (f" ({', '.join(changed)})" if changed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
