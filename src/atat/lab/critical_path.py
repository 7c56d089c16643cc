"""How far a finished workflow run was from the fastest schedule its DAG allows.

Reads Snakemake's own run log (``.snakemake/log/<date>.snakemake.log``: every job's block with
its ``input:``/``output:`` files and start time, and its ``Finished jobid:`` time) and reports
two lower bounds on the run's wall time, each from the jobs' measured durations:

* the **critical path**: the longest chain of jobs, each waiting for the outputs of the one
  before (no number of cores runs the DAG faster);
* the **work bound**: the jobs' durations times their threads, summed, over the cores the run
  was given (no schedule on these cores runs it faster).

``wall / max(critical path, work bound)`` is what scheduling can still win (1.0: nothing).
For several logs of one run (a stopped run and its relaunch) the wall time in that ratio is the
time Snakemake was running, each invocation's first to last time stamp summed; the pauses
between invocations are reported beside it.
Durations are wall times of jobs that shared the machine with their neighbours, so both bounds
describe this run, not an idle machine.  ``python -m atat.lab.critical_path [LOG ...]`` prints
the bounds and the jobs on the critical path; without LOG, the newest run log under
``.snakemake/log``.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Sequence

_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_RULE = re.compile(r"^(?:local)?(?:checkpoint|rule) (\S+):$")
_FIELD = re.compile(r"^    (\w+): (.*)$")
_DONE = re.compile(r"^Finished jobid: (\d+)")
_CORES = re.compile(r"^Provided cores: (\d+)")
_NEW_RUN = "Building DAG of jobs..."
#: jobids restart with every Snakemake invocation: a log of several runs (a stopped and
#: relaunched run, logs given one after the other) keys its jobs by run * _RUN_KEY + jobid
_RUN_KEY = 1_000_000


@dataclass
class Job:
    jobid: int
    rule: str
    start: datetime
    end: datetime | None = None
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    threads: int = 1
    wildcards: str = ""

    @property
    def seconds(self) -> float:
        return 0.0 if self.end is None else (self.end - self.start).total_seconds()

    @property
    def label(self) -> str:
        return f"{self.rule}[{self.wildcards}]" if self.wildcards else self.rule


@dataclass
class Run:
    jobs: dict[int, Job]
    cores: int
    start: datetime
    end: datetime
    #: (first, last) time stamp of each Snakemake invocation in the text, in order
    segments: list[tuple[datetime, datetime]] = field(default_factory=list)


def _paths(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def parse(text: str) -> Run:
    """The jobs of a Snakemake run log (or of several runs' logs one after the other: a
    stopped run and its relaunch; ``segments`` holds each invocation's span, so that the
    pause between them can be told apart); a job without a ``Finished`` line (failed or
    interrupted) keeps ``end = None`` and counts with duration 0."""
    jobs: dict[int, Job] = {}
    stamp: datetime | None = None
    first: datetime | None = None
    cores = 1
    block: dict[str, str] | None = None
    rule = ""
    block_start: datetime | None = None
    run = 0
    segments: list[tuple[datetime, datetime]] = []
    seg_first: datetime | None = None

    def close() -> None:
        if block is not None and "jobid" in block and block_start is not None:
            jid = run * _RUN_KEY + int(block["jobid"])
            jobs[jid] = Job(jid, rule, block_start, inputs=_paths(block.get("input", "")),
                            outputs=_paths(block.get("output", "")),
                            threads=int(block.get("threads", "1")),
                            wildcards=block.get("wildcards", ""))

    for line in text.splitlines():
        if m := _STAMP.match(line):
            stamp = datetime.strptime(" ".join(m[1].split()), "%a %b %d %H:%M:%S %Y")
            first = first or stamp
            seg_first = seg_first or stamp
            continue
        if m := _FIELD.match(line):
            if block is not None:
                block[m[1]] = m[2]
            continue
        close()
        block = None
        if line.startswith(_NEW_RUN) and (jobs or first is not None):
            run += 1
            if seg_first is not None and stamp is not None:
                segments.append((seg_first, stamp))
            seg_first = None
        elif m := _RULE.match(line):
            block, rule, block_start = {}, m[1], stamp
        elif (m := _DONE.match(line)) and run * _RUN_KEY + int(m[1]) in jobs:
            jobs[run * _RUN_KEY + int(m[1])].end = stamp
        elif m := _CORES.match(line):
            cores = int(m[1])
    close()
    if first is None or stamp is None:
        raise ValueError("no time stamps: not a Snakemake run log")
    if seg_first is not None:
        segments.append((seg_first, stamp))
    return Run(jobs, cores, first, stamp, segments)


def _producers(jobs: dict[int, Job]) -> dict[str, int]:
    return {out: j.jobid for j in jobs.values() for out in j.outputs}


def dependencies(jobs: dict[int, Job]) -> dict[int, set[int]]:
    """jobid -> the jobs of this run whose outputs it reads (an input inside a directory
    output counts)."""
    made = _producers(jobs)
    deps: dict[int, set[int]] = {}
    for j in jobs.values():
        found: set[int] = set()
        for path in j.inputs:
            parts = Path(path).parts
            for k in range(len(parts), 0, -1):
                src = made.get(str(Path(*parts[:k])))
                if src is not None and src != j.jobid:
                    found.add(src)
                    break
        deps[j.jobid] = found
    return deps


@dataclass
class Bounds:
    wall_s: float
    critical_path_s: float
    work_bound_s: float
    busy_core_s: float
    cores: int
    path: list[Job]
    #: the time Snakemake was running: ``wall_s`` less the pauses between invocations
    running_s: float
    invocations: int

    @property
    def lower_bound_s(self) -> float:
        return max(self.critical_path_s, self.work_bound_s)

    @property
    def ratio(self) -> float:
        return self.running_s / self.lower_bound_s if self.lower_bound_s else float("nan")


def bounds(run: Run) -> Bounds:
    deps = dependencies(run.jobs)
    finish: dict[int, float] = {}
    before: dict[int, int | None] = {}
    for j in sorted(run.jobs.values(), key=lambda j: (j.start, j.jobid)):
        prev = max(deps[j.jobid], key=lambda d: finish.get(d, 0.0), default=None)
        finish[j.jobid] = j.seconds + (finish.get(prev, 0.0) if prev is not None else 0.0)
        before[j.jobid] = prev
    path: list[Job] = []
    node = max(finish, key=finish.__getitem__, default=None)
    while node is not None:
        path.append(run.jobs[node])
        node = before[node]
    busy = sum(j.seconds * j.threads for j in run.jobs.values())
    wall = (run.end - run.start).total_seconds()
    running = sum((b - a).total_seconds() for a, b in run.segments) if run.segments else wall
    return Bounds(wall_s=wall, running_s=running, invocations=max(1, len(run.segments)),
                  critical_path_s=max(finish.values(), default=0.0),
                  work_bound_s=busy / run.cores, busy_core_s=busy, cores=run.cores,
                  path=path[::-1])


def report(b: Bounds) -> str:
    idle = b.cores * b.running_s - b.busy_core_s
    lines = [f"wall time                     {b.wall_s:>9.0f} s"]
    if b.invocations > 1:
        lines.append(f"  of which Snakemake ran       {b.running_s:>9.0f} s ({b.invocations} "
                     f"invocations, {b.wall_s - b.running_s:.0f} s between them)")
    ratio = ("running" if b.invocations > 1 else "wall") + " / max(the two bounds)"
    lines += [f"critical path (any cores)     {b.critical_path_s:>9.0f} s",
              f"work / {b.cores} cores                 {b.work_bound_s:>9.0f} s "
              f"({b.busy_core_s:.0f} core-s of jobs)",
              f"{ratio:<30}{b.ratio:>9.2f}  (idle core-s: {idle:.0f})",
              "critical path:"]
    lines += [f"  {j.seconds:>7.0f} s  {j.label}" for j in b.path]
    return "\n".join(lines)


def newest_log(root: Path = Path(".snakemake/log")) -> Path:
    logs = sorted(root.glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
    if not logs:
        raise FileNotFoundError(f"no *.snakemake.log under {root}: give the run log's path")
    return logs[-1]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m atat.lab.critical_path", description=__doc__
                                 .split("\n\n")[0])
    ap.add_argument("logs", nargs="*", help="Snakemake run log(s), in order (default: the "
                    "newest under .snakemake/log)")
    args = ap.parse_args(argv)
    try:
        paths = [Path(p) for p in args.logs] or [newest_log()]
        print(", ".join(map(str, paths)) + ":")
        text = "\n".join(p.read_text(errors="replace") for p in paths)
        print(report(bounds(parse(text))))
    except (OSError, ValueError) as e:
        print(f"atat.lab.critical_path: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
