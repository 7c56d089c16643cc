"""The jobs a targeted rebuild plans: for every paper output (:data:`atat.analysis.paper.REGISTRY`) the
jobs of a dry run of its files from an empty ``results/`` (``snakemake -n --forceall <files>``),
computed from one DAG of ``all`` built with Snakemake's Python API (one process; a CLI dry run
per output of the paper config takes ~7 s each), and the cone the registry predicts from the
files the output reads (:func:`atat.analysis.paper.output_reads`).

``python -m atat.lab.target_cones`` prints a Markdown table (per output and config: the jobs
of its dry run, of which models trained, AutoAttack jobs and inversions) -- the numbers of
config/README.md; ``--overlay pilot=config/overlays/pilot-cell.yaml`` counts an overlay.
``tests/test_targeted_rebuilds.py`` checks dry run == registry cone for every output."""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import yaml

ROOT = Path(__file__).resolve().parents[3]

JobKey = tuple[str, tuple[str, ...]]  # (rule, sorted output files)


@dataclass
class Dag:
    """The jobs of ``all`` for one config: each job's direct dependencies, the job making each
    file, and the merged config the workflow saw."""

    deps: dict[JobKey, set[JobKey]]
    producer: dict[str, JobKey]
    config: dict

    def cone(self, jobs: Iterable[JobKey]) -> set[JobKey]:
        """``jobs`` and every job they depend on, transitively (what a dry run plans for their
        files when no file exists)."""
        seen: set[JobKey] = set()
        stack = list(jobs)
        while stack:
            job = stack.pop()
            if job not in seen:
                seen.add(job)
                stack.extend(self.deps[job])
        return seen

    def jobs_of(self, files: Iterable[str]) -> set[JobKey]:
        """The jobs making ``files``; a file no job makes is a KeyError naming it."""
        out = set()
        for f in files:
            if f not in self.producer:
                raise KeyError(f"no job of the DAG makes {f}")
            out.add(self.producer[f])
        return out


def build_dag(configfiles: Sequence[str | Path], workdir: str | Path | None = None) -> Dag:
    """The DAG of ``all`` with every job to run (``--forceall``), built in this process in
    ``workdir`` (a fresh temporary directory by default: nothing is locked or written in the
    checkout)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (ConfigSettings, DAGSettings, OutputSettings,
                                          ResourceSettings)

    work = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="atat-dag-"))
    files = [Path(c).resolve() for c in configfiles]
    with SnakemakeApi(OutputSettings(quiet=None)) as api:
        wf_api = api.workflow(resource_settings=ResourceSettings(cores=1),
                              config_settings=ConfigSettings(configfiles=files),
                              snakefile=ROOT / "Snakefile", workdir=work)
        wf_api.dag(DAGSettings(targets={"all"}, forceall=True))
        wf = wf_api._workflow
        wf._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        wf._build_dag()

        def key(job) -> JobKey:
            return (job.rule.name, tuple(sorted(str(o) for o in job.output)))

        deps = {key(j): {key(d) for d in wf.dag.dependencies[j]} for j in wf.dag.jobs}
        producer = {str(o): key(j) for j in wf.dag.jobs for o in j.output}
        return Dag(deps, producer, dict(wf.config))


def plan_of(dag: Dag):
    """The :class:`atat.analysis.paper.Plan` of the config the DAG was built from."""
    from atat.plan.config import model_runs
    from atat.analysis.paper import Plan

    regressions = yaml.safe_load((ROOT / "config" / "regressions.yaml").read_text()) or {}
    return Plan(dag.config, model_runs(dag.config), regressions)


def cones(dag: Dag) -> dict[str, tuple[set[JobKey], set[JobKey]]]:
    """Entry id -> (jobs of a dry run of its files, the registry's cone: the jobs making its
    files, its own summary and per-image table, and the cone of every file it reads) for
    every entry this config builds."""
    from atat.analysis.paper import (REGISTRY, output_per_image_file, output_reads, output_summary_file,
                            per_image_selection, summary_selection)

    plan = plan_of(dag)
    out = {}
    for entry in REGISTRY:
        targets = entry.targets(plan)
        if not targets:
            continue
        planned = dag.cone(dag.jobs_of(targets))
        own = dag.jobs_of(targets)
        if summary_selection(plan, entry.id) is not None:
            own |= dag.jobs_of([output_summary_file(entry.id)])
        if per_image_selection(plan, entry.id) is not None:
            own |= dag.jobs_of([output_per_image_file(entry.id)])
        out[entry.id] = (planned, own | dag.cone(dag.jobs_of(output_reads(plan, entry.id))))
    return out


def job_counts(dag: Dag) -> list[tuple[str, int, Counter]]:
    """(entry id, jobs of a dry run of its files, jobs by rule) for every entry built."""
    return [(eid, len(planned), Counter(rule for rule, _ in planned))
            for eid, (planned, _) in cones(dag).items()]


def markdown(dags: dict[str, Dag]) -> str:
    """One row per output, per config (column label): the jobs of a dry run of its files, of
    which models trained (``train_model``), AutoAttack jobs and inversions (``invert``: one
    per model and attack, whatever ``inversion.classes_per_job`` shards it into)."""
    counts = {label: {e: (n, r) for e, n, r in job_counts(dag)} for label, dag in dags.items()}
    head = " | ".join(f"{label}: jobs of {len(dag.deps)} / models / AutoAttack / inversions"
                      for label, dag in dags.items())
    lines = [f"| output | {head} |", "|---|" + "---:|" * len(dags)]
    ids = list(dict.fromkeys(e for c in counts.values() for e in c))
    for eid in ids:
        cells = []
        for label in dags:
            if eid not in counts[label]:
                cells.append("not built")
                continue
            n, r = counts[label][eid]
            cells.append(f"{n} / {r['train_model']} / {r['autoattack']} / {r['invert']}")
        lines.append(f"| {eid} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--overlay", action="append", default=[], metavar="LABEL=FILE[,FILE]",
                    help="a config to count, as overlays on config/config.yaml (default: "
                         "paper= and demo=config/demo.yaml)")
    args = ap.parse_args(argv)
    given = args.overlay or ["paper=", "demo=config/demo.yaml"]
    dags = {}
    for item in given:
        label, _, files = item.partition("=")
        dags[label] = build_dag([ROOT / "config" / "config.yaml",
                                 *(ROOT / f for f in files.split(",") if f)])
    print(markdown(dags))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
