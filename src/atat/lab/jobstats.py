"""CPU and wall time of every workflow job, from the jobs' own logs.

Snakemake's ``benchmark:`` files undercount the CPU time of short jobs: ``cpu_time`` is the
last psutil sample, taken every 0.5 s for the first 15 s and then only every 30 s, so what a
job burns after its last sample is lost (an AutoAttack job of 16-45 s lost most of it).  Each
job therefore logs one line at exit, from ``getrusage`` of its own process and its waited-for
children::

    job resources: rule=train_model cpu_s=51.2 user_s=49.8 sys_s=1.4 wall_s=55.0 max_rss_mb=812 threads=1

(written by :func:`atat.base.progress.log_resources_at_exit`, which every job calls) and
``python -m atat.lab.jobstats logs`` sums those lines per rule (the per-rule CPU table of
docs/miniature.md).  A log holds the current attempt only (``*.attempts.log`` keeps all
attempts and is not read), so a retried job counts once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable, Sequence

from atat.base.progress import LINE


def collect(paths: Iterable[Path]) -> dict[str, dict[str, float]]:
    """Per rule: jobs, CPU seconds, wall seconds, max RSS (MB), from the logs' exit lines."""
    out: dict[str, dict[str, float]] = {}
    for path in paths:
        if path.name.endswith(".attempts.log"):
            continue
        for m in LINE.finditer(path.read_text(errors="replace")):
            row = out.setdefault(m["rule"], {"jobs": 0, "cpu_s": 0.0, "wall_s": 0.0,
                                             "max_rss_mb": 0})
            row["jobs"] += 1
            row["cpu_s"] += float(m["cpu"])
            row["wall_s"] += float(m["wall"])
            row["max_rss_mb"] = max(row["max_rss_mb"], int(m["rss"]))
    return out


def format_table(stats: dict[str, dict[str, float]]) -> str:
    rows = sorted(stats.items(), key=lambda kv: -kv[1]["cpu_s"])
    total_cpu = sum(r["cpu_s"] for _, r in rows) or 1.0
    lines = [f"{'rule':28} {'jobs':>5} {'CPU s':>9} {'share':>6} {'job wall s':>11} "
             f"{'max RSS MB':>10}"]
    for rule, r in rows:
        lines.append(f"{rule:28} {r['jobs']:>5} {r['cpu_s']:>9.0f} "
                     f"{100 * r['cpu_s'] / total_cpu:>5.1f}% {r['wall_s']:>11.0f} "
                     f"{r['max_rss_mb']:>10}")
    lines.append(f"{'total':28} {sum(r['jobs'] for _, r in rows):>5} "
                 f"{sum(r['cpu_s'] for _, r in rows):>9.0f}")
    return "\n".join(lines)


#: columns of :func:`write_csv` (what ``python -m atat.lab.forecast --measured`` reads)
CSV_FIELDS = ("rule", "jobs", "cpu_s", "job_wall_s", "max_rss_mb")


def write_csv(stats: dict[str, dict[str, float]], path: str | Path) -> None:
    """The per-rule table as CSV (atomically), by CPU seconds: the measured side of
    ``python -m atat.lab.forecast --measured``."""
    from atat.base import io

    rows = sorted(stats.items(), key=lambda kv: -kv[1]["cpu_s"])
    io.write_csv_rows(path, list(CSV_FIELDS), (
        {"rule": rule, "jobs": int(r["jobs"]), "cpu_s": f"{r['cpu_s']:.1f}",
         "job_wall_s": f"{r['wall_s']:.1f}", "max_rss_mb": int(r["max_rss_mb"])}
        for rule, r in rows))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m atat.lab.jobstats",
                                 description="CPU time per rule from the jobs' logs")
    ap.add_argument("logs", nargs="?", default="logs", help="the workflow's log folder")
    ap.add_argument("--csv", help="also write the per-rule table as CSV here (the measured "
                                  "side of python -m atat.lab.forecast --measured)")
    args = ap.parse_args(argv)
    stats = collect(sorted(Path(args.logs).rglob("*.log")))
    if not stats:
        print(f"no 'job resources' lines under {args.logs}", file=sys.stderr)
        return 1
    print(format_table(stats))
    if args.csv:
        write_csv(stats, args.csv)
        print(f"written: {args.csv}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
