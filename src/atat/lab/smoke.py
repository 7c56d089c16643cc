"""The quick check's verdict (``make smoke``): after the tiny config has run end to end in its
own directory, say which kinds of output the workflow wrote there, one line each, and fail
naming a kind that is missing.

    python -m atat.lab.smoke .smoke

A kind is a glob under the run directory; the tiny config builds every kind except those listed
in :data:`NOT_IN_SMOKE` (they need more models than a smoke run trains; ``make test-all`` runs
them: tests/test_workflow.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

#: kind of output -> glob under the run directory
KINDS: dict[str, str] = {
    "synthetic dataset": "resources/datasets/*/private/manifest.csv",
    "target models (training)": "results/models/**/model.pt",
    "AutoAttack records": "results/robustness/**/eps*.json",
    "HSIC records": "results/hsic/**/*.json",
    "inversion prior (StyleGAN2)": "results/generators/*.pkl",
    "evaluation model": "results/evaluation/*/model.pt",
    "face embedding": "results/face_embedding/**/model.pt",
    "inversion records": "results/inversion/**/per_image.csv",
    "summary": "results/summary.csv",
    "paper tables (CSV)": "results/tables/table*.csv",
    "paper tables (Markdown)": "results/tables/table*.md",
    "paper tables (LaTeX)": "results/tables/table*.tex",
    "figures": "results/figures/*.png",
    "preconditions table": "results/tables/preconditions.csv",
    "claims table": "results/tables/claims.csv",
    "HTML report": "results/report.html",
}
#: kinds the tiny config does not build, and where they are exercised instead
NOT_IN_SMOKE = {
    "regressions (Tables 5, 15-22, Figure 2)": "too few models; tests/test_workflow.py "
                                               "(.test/stats) in make test-all",
    "dose-response": "no lambda sweep; the miniature (make demo)",
}


def check(run_dir: str | Path) -> tuple[list[tuple[str, int, str]], list[str]]:
    """(kind, count, an example path) of every kind, and the kinds with no file."""
    root = Path(run_dir)
    rows, missing = [], []
    for kind, pattern in KINDS.items():
        found = sorted(root.glob(pattern))
        rows.append((kind, len(found), str(found[0].relative_to(root)) if found else "-"))
        if not found:
            missing.append(kind)
    return rows, missing


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", nargs="?", default=".smoke")
    args = ap.parse_args(argv)
    rows, missing = check(args.run_dir)
    width = max(len(k) for k, _, _ in rows)
    for kind, n, example in rows:
        print(f"{kind:<{width}}  {n:>4}  {example}")
    for kind, why in NOT_IN_SMOKE.items():
        print(f"{kind:<{width}}     -  not in the smoke run: {why}")
    if missing:
        print(f"smoke: no output of kind(s) {missing} under {args.run_dir}", file=sys.stderr)
        return 1
    print(f"smoke: every kind of output was built under {args.run_dir}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
