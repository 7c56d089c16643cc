"""`make forecast`: what a config costs before the first sbatch (issue 43 item 4).

For a config and a profile, per rule: jobs (from the workflow's own DAG of ``all``, built with
Snakemake's Python API, so the forecast and a dry run count the same jobs), device-hours, the
peak GPU memory, the longest job against the partition's ``max_runtime_min`` (the profile's
``config:`` entry), and the whole campaign on N GPUs. Each job's work and the devices' rates are
:mod:`atat.plan.job_cost` (the functions the workflow requests its runtimes with).

Rates: on a GPU the FLOP estimates of :class:`atat.plan.job_cost.GpuRates` (an A100), replaced by
``results/bench/bench_gpu.csv`` where ``make bench-gpu`` has run (training images/s, AutoAttack
images/s, PPA images x steps/s at the paper's shapes); on the CPU the per-network timings of
``python -m atat.lab.forecast calibrate`` (``make bench`` runs it; results/bench/forecast_cpu.csv).

    python -m atat.lab.forecast [--configfile FILE ...] [--profile profiles/slurm] [--gpus N]
    python -m atat.lab.forecast --configfile config/demo.yaml --device cpu \
        --measured tests/data/demo_jobstats_be69179.csv     # forecast vs a measured run
    python -m atat.lab.forecast --configfile config/demo.yaml --device cpu \
        --measured jobstats.csv --run RUN_DIR   # + AutoAttack's expected work from RUN_DIR's
                                                #   records (results/robustness/...)
    python -m atat.lab.forecast calibrate                   # CPU rates of the demo's jobs
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from atat.plan.job_cost import (AA_SURVIVAL, GMAC, CpuRates, GpuRates, JobCost, Pass,
                                autoattack_epsilons, figure_cost, job_cost_for,
                                runtime_request_min, stylegan_key)

ROOT = Path(__file__).resolve().parents[3]
CPU_CSV = ROOT / "results" / "bench" / "forecast_cpu.csv"
#: the host units of a GPU job's data loading at the paper's resolutions (calibrate --only host)
HOST_CSV = ROOT / "results" / "bench" / "forecast_host.csv"
#: the resolutions the paper config's loaders decode and transform at (datasets, evaluation model)
HOST_RESOLUTIONS = (224, 299)
GPU_CSV = ROOT / "results" / "bench" / "bench_gpu.csv"


# ---- the DAG's jobs ----------------------------------------------------------------------------

def dag_jobs(configfiles: Sequence[str | Path], extra_config: Mapping[str, Any] | None = None
             ) -> tuple[list[tuple[str, dict[str, str], int | None]], dict]:
    """(rule, wildcards, gpu_mem_mb) of every job of ``all`` from empty (``--forceall``) and the
    merged config, from one DAG built in this process in a temporary directory."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (ConfigSettings, DAGSettings, OutputSettings,
                                          ResourceSettings)

    work = Path(tempfile.mkdtemp(prefix="atat-forecast-"))
    files = [Path(c).resolve() for c in configfiles]
    with SnakemakeApi(OutputSettings(quiet=None)) as api:
        wf_api = api.workflow(resource_settings=ResourceSettings(cores=1),
                              config_settings=ConfigSettings(configfiles=files,
                                                             config=dict(extra_config or {})),
                              snakefile=ROOT / "Snakefile", workdir=work)
        wf_api.dag(DAGSettings(targets={"all"}, forceall=True))
        wf = wf_api._workflow
        wf._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        wf._build_dag()
        jobs = []
        for j in wf.dag.jobs:
            if j.rule.name == "all":
                continue
            mem = j.resources.get("gpu_mem_mb") if "gpu_mem_mb" in j.rule.resources else None
            jobs.append((j.rule.name, dict(j.wildcards.items()), mem))
        return jobs, dict(wf.config)


# ---- rates -------------------------------------------------------------------------------------

def read_cpu_rates(path: Path = CPU_CSV) -> CpuRates:
    """The CPU calibration written by :func:`calibrate`."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: run `python -m atat.lab.forecast calibrate` "
                                f"(or `make bench`) first")
    with open(path) as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    per = {r["key"]: float(r["cpu_s"]) for r in rows if r["key"] != "job_overhead"
           and not r["key"].startswith("overhead/")}
    rule_over = {r["key"][len("overhead/"):]: float(r["cpu_s"]) for r in rows
                 if r["key"].startswith("overhead/")}
    over = [float(r["cpu_s"]) for r in rows if r["key"] == "job_overhead"]
    if not over:
        raise ValueError(f"{path}: no job_overhead row")
    n = int(rows[0].get("side_by_side") or 1)
    regime = "one thread" if n == 1 else f"one thread, {n} jobs side by side"
    return CpuRates(per, over[0], name=f"CPU, {regime} ({rows[0].get('cpu', '?')}, "
                                       f"{rows[0].get('date', '?')})", rule_overhead_s=rule_over)


def read_host_rates(path: Path = HOST_CSV) -> tuple[dict[str, float], str] | None:
    """The host units (CPU seconds per image, one core) ``calibrate --only host`` wrote, and
    where and when they were timed; None where it has not run."""
    if not path.is_file():
        return None
    with open(path) as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    if not rows:
        return None
    return ({r["key"]: float(r["cpu_s"]) for r in rows},
            f"{rows[0].get('cpu', '?')}, {rows[0].get('date', '?')}")


def gpu_rates(path: Path = GPU_CSV, config: Mapping[str, Any] | None = None,
              host_path: Path = HOST_CSV) -> GpuRates:
    """A100 estimates, or effective FLOP/s from ``make bench-gpu`` where it ran on a GPU (not
    ``--quick``): ``train/nodef/fp32`` images/s of the paper's ResNet-152 at 224 px (PyTorch's
    default flags) -> the tf32 rate; ``ppa/optimisation`` images x steps/s (the 1024 px
    generator and the target, forward and backward, default flags) -> the tf32 rate of the
    generator passes; ``autoattack/eps*`` images/s (TF32 off, every attack on every image) ->
    the fp32 rate, median over the epsilons."""
    import statistics

    from atat.plan.job_cost import autoattack_cost

    base = GpuRates()
    host = read_host_rates(host_path)
    if host is not None:
        base = dataclasses.replace(base, host={**base.host, **host[0]},
                                   name=f"{base.name}; host units timed on {host[1]}")
    if not path.is_file():
        return base
    with open(path) as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("quick") in ("False", "false", "0")
                and r.get("gpu")]
    flops = dict(base.flops)
    found = []
    aa = []
    if config is None:
        from atat.plan.config import load_config

        config = load_config(ROOT / "config" / "config.yaml")
    for r in rows:
        v = float(r["value"])
        if r["component"] == "train" and r["variant"] == "nodef/fp32":
            flops["tf32"] = v * GMAC["resnet152"][0] * 1e9 * 2 * 3
            found.append("training")
        if r["component"] == "ppa" and r["variant"] == "optimisation":
            per = (GMAC[stylegan_key(1024)][0] + GMAC["resnet152"][0]) * 1e9 * 2 * 3
            flops["tf32/generator"] = v * per
            found.append("PPA")
        if r["component"] == "autoattack" and r["variant"].startswith("eps"):
            n_aa = int(config["autoattack"]["n_examples"])
            job = autoattack_cost("bench", architecture="resnet152", resolution=224,
                                  n_classes=530, autoattack=config["autoattack"])
            per_image = sum(p.count * GMAC["resnet152"][0] * 1e9 * 2 * (3 if p.kind == "fb"
                                                                         else 1)
                            for p in job.passes) / n_aa
            aa.append(v * per_image)
    if aa:
        flops["fp32"] = statistics.median(aa)
        found.append("AutoAttack")
    if not found:
        return base
    return GpuRates(flops, base.job_overhead_s, host=base.host,
                    name=f"{rows[0]['gpu']} (make bench-gpu {rows[0]['date']}: {', '.join(found)})")


# ---- forecast ----------------------------------------------------------------------------------

@dataclasses.dataclass
class RuleRow:
    rule: str
    jobs: int
    hours: float           # device-hours (GPU rules on the GPU; CPU-hours otherwise)
    gpu: bool
    peak_gpu_mem_mb: int | None
    longest_job: str
    longest_s: float
    longest_request_min: int
    #: the work expected where a finished run's records tell (AutoAttack: the images its
    #: models classify correctly and the attacks leave robust), by within-attack survival
    #: (estimate, low, high; atat.plan.job_cost.AA_SURVIVAL), device-hours; None: the rule's
    #: forecast is its expected work
    expected_hours: dict[str, float] | None = None
    #: jobs whose expected work came from records (the others count their upper bound)
    expected_jobs: int = 0
    #: CPU units the calibration lacks (the rule's CPU time is then not estimated)
    uncalibrated: tuple[str, ...] = ()


def autoattack_records(run_dir: str | Path, wc: Mapping[str, str], config: Mapping[str, Any]
                       ) -> list[dict[str, Any]] | None:
    """The AutoAttack records of one job of rule autoattack in the finished run ``run_dir``
    (``results/robustness/<dataset>/<arch>/<defense>/seed<seed>/eps<eps>.json``, one per
    epsilon of the job), or None where any is missing."""
    from atat.plan.config import eps_tag

    base = (Path(run_dir) / "results" / "robustness" / wc["dataset"] / wc["arch"]
            / wc["defense"] / f"seed{wc['seed']}")
    out = []
    for eps in autoattack_epsilons(wc, config):
        path = base / f"eps{eps_tag(eps)}.json"
        if not path.is_file():
            return None
        with open(path) as fh:
            out.append(json.load(fh))
    return out


def figure4_panels(jobs: Sequence[tuple[str, Mapping[str, str], int | None]],
                   config: Mapping[str, Any]) -> tuple[int, int]:
    """Figure 4's panels (atat.analysis.figures.accuracy_vs_privacy): ``(drawn, blank)``.
    A row per (attack, inversion metric) present, a column per dataset that rule invert
    attacks on the main architecture; drawn: the panels of each (cell, attack) attacked, the
    face distance only on face datasets; blank: the grid's others (a line of text saying
    the attack did not run there)."""
    from atat.analysis.summary import INVERSION_METRICS
    from atat.plan.config import main_architecture

    arch = main_architecture(config)
    cells = {(wc["dataset"], wc["attack"]) for rule, wc, _ in jobs
             if rule == "invert" and wc.get("arch") == arch}
    faces = {ds for ds, _ in cells if config["datasets"][ds].get("faces")}
    per = {ds: len(INVERSION_METRICS) - (0 if ds in faces else 1) for ds, _ in cells}
    drawn = sum(per[ds] for ds, _ in cells)
    rows = len({a for _, a in cells}) * (len(INVERSION_METRICS) - (0 if faces else 1))
    return drawn, rows * len({ds for ds, _ in cells}) - drawn


def job_costs(jobs: Sequence[tuple[str, Mapping[str, str], int | None]],
              config: Mapping[str, Any]) -> list[JobCost]:
    """Each DAG job's cost (:func:`atat.plan.job_cost.job_cost_for`; Figure 4 by its panels,
    which the DAG's inversion jobs decide, :func:`figure4_panels`)."""
    from atat.analysis.figures import DPI

    drawn, blank = (figure4_panels(jobs, config) if any(r == "figure4" for r, _, _ in jobs)
                    else (0, 0))
    out = []
    for rule, wc, mem in jobs:
        if rule == "figure4":
            out.append(figure_cost(rule, "/".join(map(str, wc.values())), panels=drawn,
                                   blank=blank, dpi=DPI))
            continue
        job = job_cost_for(rule, wc, config, gpu_mem_mb=mem)
        # every GPU rule's planned memory (the DAG's gpu_mem_mb resource) in the table
        out.append(dataclasses.replace(job, gpu_mem_mb=mem) if mem and job.gpu else job)
    return out


def forecast(jobs: Sequence[tuple[str, Mapping[str, str], int | None]], config: Mapping[str, Any],
             *, gpu: GpuRates | None, cpu: CpuRates | None,
             run_dir: str | Path | None = None,
             cpus: Mapping[str, int] | None = None) -> list[RuleRow]:
    """Per-rule rows. ``gpu`` None: every job on the CPU (the demo); else GPU rules on ``gpu``
    and the others' CPU time from ``cpu`` when given (else only counted). ``run_dir``: a
    finished run whose AutoAttack records give each autoattack job's expected work
    (:func:`autoattack_records`; ``hours`` stays the upper bound the runtime request uses).
    ``cpus``: rule -> the cores a GPU job gets (the profile's ``cpus_per_gpu``), the most data
    loader workers that can feed its GPU (:meth:`atat.plan.job_cost.GpuRates.seconds`)."""
    by_rule: dict[str, list[tuple[JobCost, float]]] = defaultdict(list)
    expected: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    expected_jobs: dict[str, int] = defaultdict(int)
    uncalibrated: dict[str, set[str]] = defaultdict(set)

    def seconds(job: JobCost) -> float:
        if gpu is not None and job.gpu:
            try:
                return gpu.seconds(job, cpus=(cpus or {}).get(job.rule))
            except ValueError:   # no GPU model of its work (train_generator's steps)
                return float("nan")
        if cpu is None:
            return float("nan")
        missing = {cpu.unit_key(p) for p in job.passes} - set(cpu.per_unit)
        if missing:   # a calibration older than the unit: not estimated, named in the table
            uncalibrated[job.rule].update(missing)
            return float("nan")
        return cpu.seconds(job)

    for (rule, wc, mem), job in zip(jobs, job_costs(jobs, config)):
        sec = seconds(job)
        by_rule[rule].append((job, sec))
        if rule == "autoattack" and run_dir is not None:
            records = autoattack_records(run_dir, wc, config)
            for survival in AA_SURVIVAL:
                expected[rule][survival] += (sec if records is None else seconds(job_cost_for(
                    rule, wc, config, autoattack_records=records, survival=survival))) / 3600
            expected_jobs[rule] += records is not None
    rows = []
    for rule, items in by_rule.items():
        longest = max(items, key=lambda x: (x[1] if not math.isnan(x[1]) else -1))
        mems = [j.gpu_mem_mb for j, _ in items if j.gpu_mem_mb]
        on_gpu = gpu is not None and items[0][0].gpu
        rows.append(RuleRow(rule, len(items), sum(s for _, s in items) / 3600, on_gpu,
                            max(mems) if mems and on_gpu else None, longest[0].name, longest[1],
                            runtime_request_min(longest[1]) if not math.isnan(longest[1]) else 0,
                            dict(expected[rule]) if rule in expected else None,
                            expected_jobs.get(rule, 0), tuple(sorted(uncalibrated.get(rule, ())))))
    rows.sort(key=lambda r: -(r.hours if not math.isnan(r.hours) else -1))
    return rows


def format_table(rows: Sequence[RuleRow], *, max_runtime_min: int | None, n_gpus: int,
                 device: str) -> str:
    """The forecast as text: per rule, then the campaign."""
    lim = f"{max_runtime_min} min" if max_runtime_min else "none set"
    out = [f"device: {device}; partition limit (max_runtime_min): {lim}",
           f"{'rule':28s} {'jobs':>5s} {'device-h':>10s} {'on':>4s} {'peak GPU MB':>11s} "
           f"{'longest job (h)':>15s} {'request min':>11s}  fits  longest job"]
    shown = list(rows)
    if any(r.gpu for r in rows):   # a GPU forecast: the CPU rules in one line
        cpu_rows = [r for r in rows if not r.gpu]
        shown = [r for r in rows if r.gpu]
        if cpu_rows:
            h = sum(r.hours for r in cpu_rows)
            out_h = f"{h:10.1f}" if not math.isnan(h) else f"{'-':>10s}"
            out_rows = f"{len(cpu_rows)} rules: downloads, dataset preparation, merges, tables, figures"
    for r in shown:
        fits = "-" if not max_runtime_min or not r.gpu or math.isnan(r.longest_s) else (
            "yes" if r.longest_request_min <= max_runtime_min else "NO")
        mem = f"{r.peak_gpu_mem_mb:,}" if r.peak_gpu_mem_mb else "-"
        hours = f"{r.hours:10.1f}" if not math.isnan(r.hours) else f"{'-':>10s}"
        longest_h = f"{r.longest_s / 3600:15.2f}" if not math.isnan(r.longest_s) else f"{'-':>15s}"
        out.append(f"{r.rule:28s} {r.jobs:5d} {hours} {'GPU' if r.gpu else 'CPU':>4s} "
                   f"{mem:>11s} {longest_h} {r.longest_request_min:11d}  "
                   f"{fits:>4s}  {r.longest_job}")
    if len(shown) < len(rows):
        out.append(f"{'CPU rules':28s} {sum(r.jobs for r in cpu_rows):5d} {out_h}  CPU "
                   f"{'-':>11s} {'':15s} {'':11s}        {out_rows}")
    gpu_h = sum(r.hours for r in rows if r.gpu and not math.isnan(r.hours))
    unmodelled = [r.rule for r in rows if r.gpu and math.isnan(r.hours)]
    cpu_h = sum(r.hours for r in rows if not r.gpu and not math.isnan(r.hours))
    longest = max((r.longest_s for r in rows if r.gpu and not math.isnan(r.longest_s)),
                  default=0.0) / 3600
    cpu_text = f", CPU {cpu_h:,.1f} h" if any(
        not r.gpu and not math.isnan(r.hours) for r in rows) else " (CPU rules not estimated)"
    if not any(r.gpu for r in rows):
        cpu_text = cpu_text.lstrip(", ")
    gpu_text = f"GPU {gpu_h:,.0f} h" if any(r.gpu for r in rows) else ""
    if unmodelled:
        gpu_text += f" (without {', '.join(unmodelled)}: no GPU model of its work)"
    out.append(f"{'total':28s} {sum(r.jobs for r in rows):5d}   {gpu_text}{cpu_text}")
    missing = sorted({u for r in rows for u in r.uncalibrated})
    if missing:
        out.append(f"not estimated ({', '.join(r.rule for r in rows if r.uncalibrated)}): "
                   f"the calibration lacks {', '.join(missing)} (python -m atat.lab.forecast "
                   f"calibrate times them)")
    if gpu_h:
        out.append(f"campaign on {n_gpus} GPUs: >= {max(gpu_h / n_gpus, longest):,.1f} h wall "
                   f"(GPU-hours / N, or the longest job; queueing and the DAG's order not "
                   f"included) = {max(gpu_h / n_gpus, longest) / 24:,.1f} days")
    return "\n".join(out)


def read_profile(profile: str | Path | None,
                 config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``config:`` entries of a Snakemake profile (``key=value`` strings) and the cluster
    settings the workflow reads with it (atat.plan.cluster.load_cluster_settings:
    ``max_runtime_min``, ``gpu_cards`` as cards, ``gpu_card_resource``; the file the entries or
    ``config`` name, ``profiles/slurm/cluster.yaml`` by default, their own keys winning), and
    ``cpus_per_gpu``: rule -> the cores the profile's ``set-resources`` give its GPU jobs."""
    from atat.plan.cluster import load_cluster_settings

    if not profile:
        return {}
    path = Path(profile)
    path = path / "config.yaml" if path.is_dir() else path
    data = yaml.safe_load(path.read_text()) or {}
    out: dict[str, Any] = {}
    for entry in data.get("config") or []:
        key, _, val = str(entry).partition("=")
        out[key.strip()] = int(val) if val.strip().isdigit() else val.strip()
    rules = (data.get("set-resources") or {}).items()
    cpus = {rule: int(res["cpus_per_gpu"]) for rule, res in rules
            if isinstance(res, Mapping) and "cpus_per_gpu" in res}
    return {**out, **load_cluster_settings({**out, **(config or {})}, ROOT),
            "cpus_per_gpu": cpus}


def read_measured(path: str | Path) -> dict[str, tuple[int, float]]:
    """rule -> (jobs, CPU-s) of a measured run (columns rule, jobs, cpu_s)."""
    with open(path) as fh:
        return {r["rule"]: (int(r["jobs"]), float(r["cpu_s"])) for r in csv.DictReader(
            line for line in fh if not line.startswith("#"))}


#: rules whose forecast is an upper bound and whose expected work a finished run's records
#: give (``--run``)
EXPECTED_FROM_RUN = ("autoattack",)


def compare(rows: Sequence[RuleRow], measured: Mapping[str, tuple[int, float]], *,
            min_cpu_s: float = 10.0, tolerance: float = 0.30) -> list[dict[str, Any]]:
    """Forecast vs measured CPU-s per rule (rules with >= ``min_cpu_s`` measured). The
    forecast compared is the expected work where the row has one (``expected_hours``:
    AutoAttack with ``--run``), else the row's forecast; ``upper_cpu_s`` is the upper bound
    where the two differ."""
    fc = {r.rule: r for r in rows}
    out = []
    for rule, (jobs, cpu_s) in sorted(measured.items(), key=lambda x: -x[1][1]):
        if cpu_s < min_cpu_s:
            continue
        r = fc.get(rule)
        upper = r.hours * 3600 if r else float("nan")
        exp = r.expected_hours if r else None
        f = exp["estimate"] * 3600 if exp else upper
        ratio = f / cpu_s if cpu_s else float("nan")
        if exp:
            basis = (f"expected from the records of {r.expected_jobs} of {r.jobs} jobs"
                     + (" (the others: upper bound)" if r.expected_jobs < r.jobs else ""))
        elif rule in EXPECTED_FROM_RUN:
            basis = "upper bound (no --run: every image classified correctly, none broken)"
        else:
            basis = ""
        out.append(dict(rule=rule, jobs_measured=jobs, jobs_forecast=r.jobs if r else 0,
                        measured_cpu_s=cpu_s, forecast_cpu_s=f,
                        upper_cpu_s=upper if exp else None,
                        expected_low_cpu_s=exp["low"] * 3600 if exp else None,
                        expected_high_cpu_s=exp["high"] * 3600 if exp else None,
                        basis=basis, ratio=ratio, within=abs(ratio - 1) <= tolerance))
    return out


def format_compare(rows: Sequence[Mapping[str, Any]], *, min_cpu_s: float = 10.0,
                   tolerance: float = 0.30) -> str:
    """The comparison as a Markdown table, the count of rules within the tolerance and how
    each upper-bound rule was counted."""
    pct = f"±{tolerance * 100:.0f}%"
    out = [f"| rule | jobs (run / DAG) | measured CPU-s | forecast CPU-s | upper bound CPU-s | "
           f"forecast / measured | within {pct} |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        upper = f"{r['upper_cpu_s']:,.0f}" if r.get("upper_cpu_s") is not None else "="
        out.append(f"| {r['rule']} | {r['jobs_measured']} / {r['jobs_forecast']} | "
                   f"{r['measured_cpu_s']:,.0f} | {r['forecast_cpu_s']:,.0f} | {upper} | "
                   f"{r['ratio']:.2f} | {'yes' if r['within'] else 'no'} |")
    within = sum(1 for r in rows if r["within"])
    out.append("")
    out.append(f"{within} of {len(rows)} rules with >= {min_cpu_s:g} measured CPU-s within "
               f"{pct} (forecast CPU-s: the expected work where shown, else the forecast; "
               f"'=' the upper bound is the forecast)")
    for r in rows:
        if r.get("basis"):
            line = f"{r['rule']}: {r['basis']}"
            if r.get("expected_low_cpu_s") is not None:
                line += (f"; images left within an attack (later targets, restarts, queries): "
                         f"geometric {r['forecast_cpu_s']:,.0f} CPU-s, bounds "
                         f"{r['expected_low_cpu_s']:,.0f}-{r['expected_high_cpu_s']:,.0f} "
                         f"(ratio {r['expected_low_cpu_s'] / r['measured_cpu_s']:.2f}-"
                         f"{r['expected_high_cpu_s'] / r['measured_cpu_s']:.2f})")
            out.append(line)
    return "\n".join(out)


# ---- CPU calibration ---------------------------------------------------------------------------

def _cpu_time(fn: Callable[[], Any], repeats: int = 3) -> float:
    """Median process CPU seconds of ``fn`` (one thread), after one warm-up call."""
    import statistics

    fn()
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def time_image_reads(resolution: int, n: int = 64, repeats: int = 3,
                     timer: Callable[[Callable[[], Any], int], float] | None = None) -> float:
    """CPU seconds per image of reading a dataset's PNG and transforming it at
    ``resolution`` as the evaluation loaders do (atat.data.loading.build_transform, no
    augmentation): ``n`` random RGB images written at ``resolution`` to a temporary folder,
    each opened, decoded and transformed. ``timer``: (fn, repeats) -> CPU seconds (tests)."""
    import numpy as np
    from PIL import Image

    from atat.data.loading import build_transform

    transform = build_transform(int(resolution), train=False)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="atat-calibrate-") as tmp:
        paths = []
        for i in range(n):
            path = Path(tmp) / f"{i}.png"
            Image.fromarray(rng.integers(0, 256, (resolution, resolution, 3), dtype=np.uint8)
                            ).save(path)
            paths.append(path)

        def read() -> None:
            for path in paths:
                with Image.open(path) as im:
                    transform(im.convert("RGB"))

        return (timer or _cpu_time)(read, repeats) / n


def time_augment(resolution: int, augmentation: Mapping[str, Any] | None, n: int = 200,
                 repeats: int = 3,
                 timer: Callable[[Callable[[], Any], int], float] | None = None) -> float:
    """CPU seconds per image of the training transform at ``resolution``
    (atat.data.loading.build_transform with the config's ``augmentation``) on ``n`` decoded
    RGB images held in memory, as a training epoch transforms its cached images."""
    import numpy as np
    from PIL import Image

    from atat.data.loading import build_transform

    transform = build_transform(int(resolution), train=True, aug=augmentation)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (resolution, resolution, 3), dtype=np.uint8))
              for _ in range(n)]
    return (timer or _cpu_time)(lambda: [transform(im) for im in images], repeats) / n


def sample_photo(resolution: int) -> Any:
    """A natural photograph (matplotlib's sample portrait, grace_hopper.jpg), cropped square
    and resized to ``resolution`` px: the content a face dataset's decoder meets (random
    pixels would decode slower than any photograph)."""
    import matplotlib
    from PIL import Image

    path = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    with Image.open(path) as im:
        img = im.convert("RGB")
    w, h = img.size
    side = min(w, h)
    left, top = (w - side) // 2, (h - side) // 2
    return img.crop((left, top, left + side, top + side)).resize(
        (int(resolution), int(resolution)), Image.BICUBIC)


def time_decode(resolution: int, fmt: str = "jpeg", n: int = 200, repeats: int = 3,
                timer: Callable[[Callable[[], Any], int], float] | None = None) -> float:
    """CPU seconds per image of decoding one dataset file at ``resolution`` to RGB as
    atat.data.loading.ManifestDataset does (open, convert, load): ``fmt`` jpeg (quality 90,
    the real datasets' archives) or png (the painted populations), of :func:`sample_photo`,
    from memory (the file system's read is not counted), one thread."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    sample_photo(resolution).save(buf, "JPEG" if fmt == "jpeg" else "PNG",
                                  **({"quality": 90} if fmt == "jpeg" else {}))
    data = buf.getvalue()

    def decode() -> None:
        for _ in range(n):
            with Image.open(io.BytesIO(data)) as im:
                im.convert("RGB").load()

    return (timer or _cpu_time)(decode, repeats) / n


def calibrate_host(augmentation: Mapping[str, Any] | None,
                   resolutions: Sequence[int] = HOST_RESOLUTIONS, repeats: int = 3
                   ) -> dict[str, float]:
    """The host units of a GPU job's data loading (:data:`atat.plan.job_cost.HOST_CPU_S`):
    decoding a JPEG (``jpeg@<res>/image``) and the training transform of the paper config's
    ``augmentation`` on a decoded photograph (``augment@<res>/image``), one thread, at each
    resolution."""
    import torch

    from atat.data.loading import build_transform

    torch.set_num_threads(1)
    out = {}
    for r in resolutions:
        out[f"jpeg@{r}/image"] = time_decode(r, "jpeg", repeats=repeats)
        transform = build_transform(int(r), train=True, aug=augmentation)
        img = sample_photo(r)
        n = 100
        out[f"augment@{r}/image"] = _cpu_time(lambda: [transform(img) for _ in range(n)],
                                              repeats) / n
        for k in (f"jpeg@{r}/image", f"augment@{r}/image"):
            print(f"{k:45s} {out[k]:.6g} CPU-s", flush=True)
    return out


def time_knn_pairs(dim: int, n: int = 400, k: int = 3, repeats: int = 3,
                   timer: Callable[[Callable[[], Any], int], float] | None = None) -> float:
    """CPU seconds per pairwise distance of rule prior_quality's k-NN statistics at feature
    width ``dim``: atat.inversion.prior_quality.manifold_coverage of ``n`` random unit-norm
    queries against ``n`` reference points (the reference's k-NN radii, n^2 pairs, then the
    queries against it, n^2 more), one thread."""
    import torch

    from atat.inversion.prior_quality import manifold_coverage

    gen = torch.Generator().manual_seed(0)
    ref = torch.nn.functional.normalize(torch.randn(n, int(dim), generator=gen), dim=1)
    q = torch.nn.functional.normalize(torch.randn(n, int(dim), generator=gen), dim=1)
    return (timer or _cpu_time)(lambda: manifold_coverage(q, ref, k), repeats) / (2 * n * n)


def time_blank_panels(dpi: int, rows: int = 5, cols: int = 2, repeats: int = 3,
                      timer: Callable[[Callable[[], Any], int], float] | None = None) -> float:
    """CPU seconds per blank panel of Figure 4 at ``dpi`` (axes off, a line of text; laid
    out, drawn and saved at a panel's size), one thread."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def draw(out: Path) -> None:
        fig, axes = plt.subplots(rows, cols, squeeze=False, figsize=(4.6 * cols, 3.8 * rows))
        for ax in axes.ravel():
            ax.axis("off")
            ax.text(0.5, 0.5, "PPDG not run on\ncell", ha="center", va="center", fontsize=9,
                    color="0.4", transform=ax.transAxes)
        fig.tight_layout()
        fig.canvas.draw()
        fig.savefig(out, format="png", dpi=dpi)
        plt.close(fig)

    with tempfile.TemporaryDirectory(prefix="atat-calibrate-") as tmp:
        return (timer or _cpu_time)(lambda: draw(Path(tmp) / "blank.png"), repeats) / (
            rows * cols)


def time_figure_panels(dpi: int, datasets: int = 2, classes: int = 20, images: int = 20,
                       repeats: int = 3,
                       timer: Callable[[Callable[[], Any], int], float] | None = None) -> float:
    """CPU seconds per panel of Figure 4 at ``dpi`` (the figure module's ``DPI``, the only
    resolution it saves at): :func:`atat.analysis.figures.accuracy_vs_privacy` itself on a synthetic
    summary of ``datasets`` face cells of the main architecture, each with NoDef, the seven
    baselines and AT-AT attacked by one attack, every inversion metric present (per-class
    means over a per-image table of ``classes`` x ``images`` per model), divided by its
    drawn panels; one thread."""
    import numpy as np
    import pandas as pd

    from atat.analysis import figures
    from atat.analysis.paper import FIGURE4_TYPES
    from atat.analysis.summary import INVERSION_METRICS

    if int(dpi) != figures.DPI:
        raise ValueError(f"panel@{dpi}: Figure 4 is saved at {figures.DPI} dpi only")
    rng = np.random.default_rng(0)
    n = classes * images     # rates are counts over their images (Wilson checks so)
    models = [{"dataset": f"cell{k}", "architecture": "arch", "seed": 0, "defense": d,
               "defense_type": d} for k in range(datasets) for d in FIGURE4_TYPES]
    summary = pd.DataFrame([{**m, "test_acc": rng.integers(500, 1100) / 1260, "n_test": 1260,
                             "ppa_n_images": n,
                             **{f"ppa_{x}": rng.integers(0, n + 1) / n for x in INVERSION_METRICS}}
                            for m in models])
    per_image = pd.DataFrame([{**m, "attack": "ppa", "class": c,
                               **{x: rng.uniform() for x in INVERSION_METRICS}}
                              for m in models for c in range(classes) for _ in range(images)])

    def draw(out: Path) -> int:
        return figures.accuracy_vs_privacy(summary, out, attacks=["ppa"],
                                           metrics=INVERSION_METRICS, architecture="arch",
                                           per_image=per_image)

    with tempfile.TemporaryDirectory(prefix="atat-calibrate-") as tmp:
        return (timer or _cpu_time)(lambda: draw(Path(tmp) / "figure4.png"), repeats) / (
            len(INVERSION_METRICS) * datasets)


def needed_units(jobs: Sequence[tuple[str, Mapping[str, str], int | None]],
                 config: Mapping[str, Any]) -> set[tuple[str, int, str]]:
    """(network, resolution, kind) of every pass of the DAG's jobs."""
    return {(p.network, p.resolution, p.kind) for job in job_costs(jobs, config)
            for p in job.passes}


def calibrate_units(config: Mapping[str, Any], needed: set[tuple[str, int, str]], *,
                    repeats: int = 3, quiet: bool = False) -> dict[str, float]:
    """CPU seconds per image (per step for ``step``) of every network, generator training step
    and image painter in ``needed`` (random weights, one thread, process CPU time)."""
    import torch
    import torchvision

    from atat.data import synthfaces as sf
    from atat.inversion.stylegan2 import Generator, train_small_generator
    from atat.training.models import build_model

    torch.set_num_threads(1)
    units: dict[str, float] = {}
    batch = int(config["training"]["batch_size"])
    gens = {}   # network key -> the train settings of a generator of that architecture
    for g in (config.get("generators") or {}).values():
        t = g.get("train")
        if t:
            r = int(config["datasets"][t["dataset"]]["resolution"])
            key = stylegan_key(r, int(t.get("channel_base", 1024)), int(t.get("channel_max", 64)))
            gens[key] = gens[f"{key}/b{int(t.get('batch_size', 16))}"] = (t, r)

    def timed_net(net: torch.nn.Module, r: int, b: int, kind: str) -> float:
        x = torch.randn(b, 3, r, r)
        opt = torch.optim.Adam(net.parameters(), 1e-4)

        def fb() -> None:
            net.train()
            opt.zero_grad()
            out = net(x)
            out = out[0] if isinstance(out, tuple) else out
            out.float().logsumexp(1).sum().backward()
            opt.step()

        def fwd() -> None:
            net.eval()
            with torch.no_grad():
                net(x)

        return _cpu_time(fb if kind == "fb" else fwd, repeats) / b

    for network, r, kind in sorted(needed):
        key = f"{network}@{r}/{kind}"
        base, sep, at = network.rpartition("/b")
        if sep and at.isdigit() and "/" not in base:   # a network at a batch of its own
            net = (torchvision.models.inception_v3(weights=None, aux_logits=False,
                                                   init_weights=False, num_classes=20)
                   if base == "inception_v3" else build_model(base, 20))
            units[key] = timed_net(net, r, int(at), kind)
        elif network.startswith("synth"):
            make, render = sf._domain_functions(network[len("synth"):])
            idents = make(4, "private", seed=0)
            units[key] = _cpu_time(lambda: [render(idents[i % 4], i, seed=0, resolution=r)
                                            for i in range(40)], repeats) / 40
        elif network.startswith("stylegan2/") and kind == "step":
            t, _ = gens[network]
            bs, steps = int(t.get("batch_size", 16)), 8
            imgs = torch.rand(4 * bs, 3, r, r) * 2 - 1
            kw = {k: t[k] for k in ("z_dim", "w_dim", "mapping_layers", "channel_base",
                                    "channel_max", "lr") if k in t}
            units[key] = _cpu_time(lambda: train_small_generator(
                None, resolution=r, steps=steps, batch_size=bs, images=imgs, **kw), 1) / steps
        elif network.startswith("stylegan2/"):
            t, _ = gens[network]
            G = Generator(z_dim=int(t.get("z_dim", 64)), c_dim=0, w_dim=int(t.get("w_dim", 64)),
                          img_resolution=r, img_channels=3,
                          mapping_kwargs=dict(num_layers=int(t.get("mapping_layers", 2))),
                          synthesis_kwargs=dict(channel_base=int(t.get("channel_base", 1024)),
                                                channel_max=int(t.get("channel_max", 64))))
            n = 20
            w = torch.randn(n, G.synthesis.num_ws, G.w_dim, requires_grad=True)

            def gfb() -> None:
                G.synthesis(w).square().mean().backward()

            def gfwd() -> None:
                with torch.no_grad():
                    G.synthesis(w.detach())

            units[key] = _cpu_time(gfb if kind == "fb" else gfwd, repeats) / n
        elif network == "read" and kind == "image":
            units[key] = time_image_reads(r, repeats=repeats)
        elif network in ("jpeg", "png") and kind == "image":
            units[key] = time_decode(r, network, repeats=repeats)
        elif network == "knn" and kind == "pair":
            units[key] = time_knn_pairs(r, repeats=repeats)
        elif network == "augment" and kind == "image":
            units[key] = time_augment(r, config.get("augmentation"), repeats=repeats)
        elif network == "panel" and kind == "draw":
            units[key] = time_figure_panels(r, repeats=repeats)
        elif network == "panel" and kind == "blank":
            units[key] = time_blank_panels(r, repeats=repeats)
        elif network == "inception_v3":
            ev = config.get("evaluation_model") or {}
            inc = torchvision.models.inception_v3(weights=None, aux_logits=False,
                                                  init_weights=False, num_classes=20)
            units[key] = timed_net(inc, r, int((ev.get("training") or {}).get("batch_size", 16)),
                                   kind)
        else:
            units[key] = timed_net(build_model(network, 20), r, batch, kind)
        if not quiet:
            print(f"{key:45s} {units[key]:.6g} CPU-s", flush=True)
    if quiet:
        return units
    units["job_overhead"] = fresh_import_cpu(
        ["snakemake.script", "torch", "torchvision", "atat.training.train", "atat.robustness",
         "atat.inversion.run", "atat.base.io"], repeats)
    return units


#: fewest timed runs of a fixed part (the median of them; one more run before, not counted,
#: fills the bytecode and file caches as the workflow's earlier jobs have)
MIN_IMPORT_RUNS = 3


def import_code(modules: Sequence[str]) -> str:
    """Python that imports ``modules`` as a job does: Snakemake's script module, then torch
    and :func:`atat.base.progress.log_resources_at_exit` (``workflow/scripts/_common.setup``
    registers the job's exit line there), then the rest; the exit line reports what the job's
    own line would (getrusage of the process and its waited-for children, at exit, before the
    interpreter's teardown)."""
    first = [m for m in ("snakemake.script", "torch") if m in modules]
    rest = [m for m in modules if m not in first]
    lines = [f"import {m}" for m in first]
    lines += ["from atat.base.progress import log_resources_at_exit",
              "log_resources_at_exit('calibrate', 1)"]
    lines += [f"import {m}" for m in rest]
    return "\n".join(lines)


def fresh_import_cpu(modules: Sequence[str], repeats: int = MIN_IMPORT_RUNS,
                     run: Callable[[str], str] | None = None) -> float:
    """A job's fixed part: the median CPU seconds of at least :data:`MIN_IMPORT_RUNS` fresh
    Pythons importing ``modules`` (:func:`import_code`), each read from its own exit line
    (the line atat.lab.jobstats sums), after one run not counted. ``run``: code -> the
    child's stderr (tests)."""
    import statistics

    from atat.base.progress import LINE

    def child(code: str) -> str:
        proc = subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                              capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        return proc.stderr

    run = run or child
    code = import_code(modules)
    run(code)   # warm-up: bytecode and file caches
    times = []
    for _ in range(max(MIN_IMPORT_RUNS, int(repeats))):
        m = LINE.search(run(code))
        if m is None:
            raise RuntimeError(f"no 'job resources' line from a fresh Python importing "
                               f"{', '.join(modules)}")
        times.append(float(m["cpu"]))
    return statistics.median(times)


def rule_scripts(rules_dir: Path = ROOT / "workflow" / "rules") -> dict[str, Path]:
    """rule -> its ``script:`` (workflow/scripts/*.py), read from the rules files."""
    import re

    out = {}
    for smk in sorted(rules_dir.glob("*.smk")):
        for block in re.split(r"^rule ", smk.read_text(), flags=re.M)[1:]:
            name = block.split(":", 1)[0].strip()
            m = re.search(r'script:\s*\n\s*"\.\./scripts/([\w]+\.py)"', block)
            if m:
                out[name] = ROOT / "workflow" / "scripts" / m.group(1)
    return out


def _module_file(module: str, src: Path = ROOT / "src") -> Path | None:
    """The source file of a module of this package (``atat...``), else None."""
    if module != "atat" and not module.startswith("atat."):
        return None
    base = src.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _absolute(module: str | None, level: int, package: str) -> str:
    """``from <level dots><module> import`` in ``package`` as an absolute module name."""
    if not level:
        return module or ""
    parts = package.split(".")
    base = parts[:len(parts) - level + 1]
    return ".".join(base + ([module] if module else []))


def lazy_imports(module: str, names: Sequence[str], src: Path = ROOT / "src") -> list[str]:
    """Modules imported inside the functions a job calls: the functions ``names`` of
    ``module`` (one of this package's) and, transitively, the module's own functions they call
    by name. A job imports them when it runs; a fresh Python importing only the script's
    imports would not."""
    import ast

    path = _module_file(module, src)
    if path is None:
        return []
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    funcs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef,
                                                              ast.AsyncFunctionDef))}
    todo, seen, out = [n for n in names if n in funcs], set(), []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(funcs[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in funcs:
                todo.append(node.func.id)
            elif isinstance(node, ast.Import):
                out += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                out.append(_absolute(node.module, node.level, package))
    return list(dict.fromkeys(m for m in out if m))


def script_modules(script: Path) -> list[str]:
    """The modules a job's script imports (anywhere in it), with what workflow/scripts/_common
    imports for every job (torch, atat.base.io, atat.base.progress, atat.base.device), and the
    modules the package's functions it calls import when they run (:func:`lazy_imports`)."""
    import ast

    mods = ["snakemake.script", "torch", "atat.base.io", "atat.base.progress", "atat.base.device"]
    lazy: list[str] = []
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found = [node.module]
            lazy += lazy_imports(node.module, [a.name for a in node.names])
        else:
            continue
        mods += [m for m in found if m not in ("_common", "__future__") and m not in mods]
    mods += [m for m in lazy if m not in mods and m != "__future__"]
    return mods


def calibrate_overheads(rules: Sequence[str], repeats: int = MIN_IMPORT_RUNS
                        ) -> dict[str, float]:
    """``overhead/<rule>``: CPU seconds of a fresh Python importing what ``rule``'s script
    imports (:func:`fresh_import_cpu`) -- a job's fixed part before its own work."""
    scripts = rule_scripts()
    out = {}
    for rule in rules:
        if rule not in scripts:
            continue
        out[f"overhead/{rule}"] = fresh_import_cpu(script_modules(scripts[rule]), repeats)
        print(f"overhead/{rule:36s} {out[f'overhead/{rule}']:.3g} CPU-s", flush=True)
    return out


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def write_units(units: Mapping[str, float], path: Path = CPU_CSV, *, side_by_side: int = 1
                ) -> None:
    from atat.base import io

    meta = {"date": time.strftime("%Y-%m-%d"), "cpu": _cpu_name(), "threads": 1,
            "side_by_side": side_by_side}
    io.write_csv_rows(path, ["key", "cpu_s", "date", "cpu", "threads", "side_by_side"],
                      ({"key": k, "cpu_s": f"{v:.6g}", **meta} for k, v in units.items()))


class Companions:
    """``n`` companion processes that repeat the same calibration (``calibrate --companion``)
    while this one times, so every rate is measured with as many one-thread jobs beside it as
    the run it forecasts keeps busy (``make demo``: 2 cores, one thread per job). Two
    processes on the 2 vCPUs of the project's host slow each other's steps a little (the
    demo's prior-training step: 184-189 ms alone, 190-202 ms side by side on 2026-12-06;
    docs/forecast.md), so a rate timed alone under-counts a run that keeps both cores busy."""

    def __init__(self, n: int, overlays: Sequence[str]):
        self.cmd = [sys.executable, "-m", "atat.lab.forecast", "calibrate", "--companion"]
        for c in overlays:
            self.cmd += ["--configfile", str(c)]
        self.n, self.procs = n, []

    def __enter__(self) -> "Companions":
        import subprocess

        self.procs = [subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL) for _ in range(self.n)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def companion_loop(config: Mapping[str, Any], needed: set[tuple[str, int, str]]) -> None:
    """The companion's work: the same units' timings, again and again, until killed."""
    while True:
        calibrate_units(config, needed, repeats=1, quiet=True)


# ---- command line ------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m atat.lab.forecast", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", default="forecast", choices=("forecast", "calibrate"))
    ap.add_argument("--configfile", action="append", default=None,
                    help="config overlays on config/config.yaml (as snakemake --configfile)")
    ap.add_argument("--profile", default=str(ROOT / "profiles" / "slurm"),
                    help="profile whose config: entries give max_runtime_min ('' for none)")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs of the campaign estimate")
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                    help="gpu: GPU rules on the GPU rates; cpu: every job on the CPU rates")
    ap.add_argument("--measured", help="CSV (rule, jobs, cpu_s) of a measured run to compare")
    ap.add_argument("--run", help="a finished run's directory: its AutoAttack records "
                                  "(results/robustness/...) give AutoAttack's expected work "
                                  "beside the upper bound")
    ap.add_argument("--calibration", default=str(CPU_CSV),
                    help="CPU calibration for --device cpu (default: what calibrate wrote)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=("all", "units", "overhead", "host"), default="all",
                    help="calibrate: the networks' rates, the rules' fixed parts, both (all), or "
                         "the paper's data-loading units (host: results/bench/forecast_host.csv"
                         "; all times them too)")
    ap.add_argument("--rules", help="calibrate: the rules whose fixed part to time "
                                    "(comma-separated; default every rule of the DAG)")
    ap.add_argument("--side-by-side", type=int, default=1, metavar="N",
                    help="calibrate: time with N - 1 companion processes repeating the same "
                         "calibration (the run's busy cores; make demo: 2)")
    ap.add_argument("--companion", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    configs = [ROOT / "config" / "config.yaml"] + [Path(c) for c in (args.configfile or [])]
    if args.command == "calibrate":
        if args.only in ("all", "host") and not args.companion:
            from atat.plan.config import load_config

            paper = load_config(ROOT / "config" / "config.yaml")
            write_units(calibrate_host(paper["augmentation"], repeats=args.repeats), HOST_CSV)
            print(f"written: {HOST_CSV}")
            if args.only == "host":
                return 0
        overlays = args.configfile or [str(ROOT / "config" / "demo.yaml")]
        units: dict[str, float] = {}
        if CPU_CSV.is_file():   # a partial calibration (--only) keeps the other rows
            with open(CPU_CSV) as fh:
                units = {r["key"]: float(r["cpu_s"]) for r in csv.DictReader(fh)}
        jobs, cfg = dag_jobs(overlays)
        if args.companion:
            companion_loop(cfg, needed_units(jobs, cfg))
            return 0
        if args.side_by_side < 1:
            raise SystemExit(f"--side-by-side {args.side_by_side}: must be >= 1")
        with Companions(args.side_by_side - 1, args.configfile or []):
            if args.only in ("all", "units"):
                units.update(calibrate_units(cfg, needed_units(jobs, cfg),
                                             repeats=args.repeats))
                write_units(units, side_by_side=args.side_by_side)
            if args.only in ("all", "overhead"):
                rules = (args.rules.split(",") if args.rules
                         else sorted({rule for rule, _, _ in jobs}))
                units.update(calibrate_overheads(rules, repeats=args.repeats))
                write_units(units, side_by_side=args.side_by_side)
        for k, v in units.items():
            print(f"{k:45s} {v:.6g} CPU-s")
        print(f"written: {CPU_CSV}")
        return 0
    jobs, config = dag_jobs(configs[1:] if len(configs) > 1 else [configs[0]])
    prof = read_profile(args.profile, config) if args.profile else {}
    # on the GPU forecast the CPU rules are only counted: their CPU calibration is the demo's
    # shapes (dataset preparation, downloads and merges at paper scale are not modelled)
    cpu = read_cpu_rates(Path(args.calibration)) if args.device == "cpu" else None
    gpu = gpu_rates(config=config) if args.device == "gpu" else None
    if args.run and not (Path(args.run) / "results").is_dir():
        raise SystemExit(f"--run {args.run}: no results/ folder there (the finished run whose "
                         f"AutoAttack records give the expected work)")
    rows = forecast(jobs, config, gpu=gpu, cpu=cpu, run_dir=args.run,
                    cpus=prof.get("cpus_per_gpu"))
    device = gpu.name if gpu else (cpu.name if cpu else "-")
    print(format_table(rows, max_runtime_min=prof.get("max_runtime_min"), n_gpus=args.gpus,
                       device=device))
    if args.measured:
        print()
        print(format_compare(compare(rows, read_measured(args.measured))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
