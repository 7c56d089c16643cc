"""The SLURM profile against a real one-node SLURM cluster on localhost.

One module-scoped run does the work (a few minutes): the tiny config of test_workflow.py goes
through the documented command, `snakemake --profile slurm ...`, stacked with the test overlay
profiles/slurm-test (no GPU requests, small memory, one injected failure), while the same
config runs locally as the reference. The tests then check what went through sbatch, that
the outputs equal the local ones, and that the injected failure was retried without losing or
duplicating anything. slurm-wlm and munge are installed from Debian when missing; the test
is skipped, with the reason, only when that is impossible (not root, no apt-get, apt fails).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from slurm.cluster import Cluster, ensure_installed  # noqa: E402
from test_workflow import TINY  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# what profiles/slurm-test sets: one thread per job, so local and SLURM runs sum floats in the
# same order and produce identical numbers
THREADS = ["--set-threads", "train_model=1", "autoattack=1", "measure_hsic=1",
           "train_evaluation_model=1", "train_face_embedding=1", "train_instrument_classifier=1",
           "train_generator=1", "invert=1"]
# A targeted rebuild (the README's `snakemake --profile slurm results/tables/<table>`): data,
# both models, AutoAttack at both epsilons (one job per model), the table's own summary and the
# table, plus the whole run's summary (the retry test's injected failure; since the targeted
# rebuilds a table no longer needs it). That is every kind of job the profile routes (CPU and
# GPU rules) and keeps the test to a few minutes on 2 cores.
TARGETS = ["results/tables/table4.csv", "results/summary.csv"]


GPU_RULES = {"train_model", "autoattack", "measure_hsic", "train_evaluation_model", "train_generator",
             "invert", "real_embeddings"}


def snakemake_cmd(workdir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--directory", str(workdir), "--configfile",
            str(ROOT / "config" / "demo.yaml"), str(workdir / "tiny.yaml"), *args]


def rule_blocks(log: str) -> Counter:
    """Jobs Snakemake started, by rule, from its log ('rule x:' / 'localrule x:')."""
    return Counter(re.findall(r"^\s*((?:local)?rule) (\w+):", log, flags=re.M))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    reason = ensure_installed()
    if reason:
        pytest.skip(reason)
    local_dir = tmp_path_factory.mktemp("local")
    slurm_dir = tmp_path_factory.mktemp("slurm")
    for d in (local_dir, slurm_dir):
        (d / "tiny.yaml").write_text(TINY)

    # the local reference runs while the cluster does the same work
    local_log = open(local_dir / "snakemake.log", "w")
    local = subprocess.Popen(snakemake_cmd(local_dir, *THREADS, "--cores", "2", *TARGETS),
                             cwd=ROOT, stdout=local_log, stderr=subprocess.STDOUT, text=True)
    # short path: the munge socket path must stay under 108 characters
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="atat-slurm-")))
    try:
        cluster.start()
        t0 = time.time()
        # the documented command, from the repository root, plus the test overlay
        proc = subprocess.run(
            snakemake_cmd(slurm_dir, "--profile", "slurm", "--profile", "profiles/slurm-test",
                          *TARGETS),
            cwd=ROOT, env=cluster.env, capture_output=True, text=True, timeout=1500)
        slurm_seconds = time.time() - t0
        jobs = cluster.jobs()
        completed = cluster.completed()
        dry = subprocess.run(snakemake_cmd(slurm_dir, "--profile", "slurm", "--profile",
                                           "profiles/slurm-test", "-n", *TARGETS),
                             cwd=ROOT, env=cluster.env, capture_output=True, text=True,
                             timeout=300)
        local.wait(timeout=1500)
        local_log.close()
        yield dict(local_dir=local_dir, slurm_dir=slurm_dir, proc=proc, jobs=jobs, dry=dry,
                   local_rc=local.returncode, local_log=(local_dir / "snakemake.log").read_text(),
                   slurm_seconds=slurm_seconds, cluster=cluster,
                   completed=completed)
    finally:
        if local.poll() is None:
            local.kill()
        started = dict(cluster.pids)
        cluster.stop()
        for name, pid in started.items():
            assert not _running(pid), f"{name} (pid {pid}) still running"


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _ok(runs):
    proc = runs["proc"]
    assert proc.returncode == 0, (proc.stdout[-4000:] + proc.stderr[-6000:]
                                  + "\n" + runs["cluster"].logs())
    assert runs["local_rc"] == 0, runs["local_log"][-4000:]


def test_every_job_went_through_sbatch(runs):
    _ok(runs)
    log = runs["proc"].stderr
    started = rule_blocks(log)
    # nothing ran on the submit host
    assert not [name for kind, name in started if kind == "localrule"], started
    submitted = re.findall(r"submitted with SLURM jobid (\d+)", log)
    slurm_jobs = {j["id"]: j for j in runs["jobs"]}
    run_id = re.search(r"SLURM run ID: (\S+)", log).group(1)
    assert all(j["name"] == run_id for j in runs["jobs"]), runs["jobs"]  # this run's jobs
    assert submitted and set(submitted) == set(slurm_jobs), (submitted, runs["jobs"])
    # the same jobs as the local run, each one a SLURM job that completed
    local = Counter(name for kind, name in rule_blocks(runs["local_log"]).elements()
                    if name != "all")
    completed = Counter(re.match(r"rule_(\w+?)(_wildcards_|$)", j["comment"]).group(1)
                        for j in runs["jobs"] if j["state"] == "COMPLETED")
    assert completed == local, (completed, local)
    # synthfaces, 2 x train, 2 x autoattack (the demo's autoattack.job per_model: both
    # epsilons of a model in one job), summary, table4
    assert sum(local.values()) >= 7 and local["autoattack"] == 2, local
    # GPU rules went to the GPU partition of the profile, the rest to the CPU partition
    for j in runs["jobs"]:
        rule = re.match(r"rule_(\w+?)(_wildcards_|$)", j["comment"]).group(1)
        assert j["partition"] == ("gpu" if rule in GPU_RULES else "cpu"), j


def test_outputs_equal_local_run(runs):
    _ok(runs)
    # every number bit-identical (training is seeded and deterministic on CPU at one thread),
    # except wall-clock durations
    local = pd.read_csv(runs["local_dir"] / "results" / "summary.csv")
    slurm = pd.read_csv(runs["slurm_dir"] / "results" / "summary.csv")
    timing = [c for c in local.columns if c.endswith("_seconds")]
    assert len(local) == 2 and len(local.columns) > 20
    pd.testing.assert_frame_equal(slurm.drop(columns=timing), local.drop(columns=timing),
                                  check_exact=True)
    for name in ["table4.csv"]:
        pd.testing.assert_frame_equal(
            pd.read_csv(runs["slurm_dir"] / "results" / "tables" / name),
            pd.read_csv(runs["local_dir"] / "results" / "tables" / name), check_exact=True)
    # the same files under results/ (nothing missing, nothing extra)
    def files(d):
        return sorted(p.relative_to(d).as_posix() for p in (d / "results").rglob("*") if p.is_file())
    assert files(runs["slurm_dir"]) == files(runs["local_dir"])
    # the model checkpoints byte for byte (atat.base.io.torch_save does not embed the file name)
    models = [p for p in files(runs["local_dir"]) if p.endswith(".pt")]
    assert models
    for rel in models:
        assert (runs["slurm_dir"] / rel).read_bytes() == (runs["local_dir"] / rel).read_bytes(), rel


def test_every_gpu_rule_has_a_block_in_both_profiles():
    """Rules declaring gpu= need a GPU block in profiles/slurm and gpu: 0 in the test overlay
    (the test cluster has no GPUs; an unlisted GPU rule would ask it for --gpus=1)."""
    import yaml

    declared = set()
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        for rule, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", smk.read_text(), re.M):
            if re.search(r"^\s+gpu\s*=", body, re.M):
                declared.add(rule)
    assert {"train_model", "autoattack"} <= declared
    prod = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())["set-resources"]
    test = yaml.safe_load((ROOT / "profiles" / "slurm-test" / "config.yaml").read_text())["set-resources"]
    for rule in declared:
        assert prod.get(rule, {}).get("gpu") == 1 and "cpus_per_gpu" in prod[rule], rule
        assert test.get(rule, {}).get("gpu") == 0 and test[rule].get("gpu_model", 0) is None, rule
    assert not any("cpus_per_task" in v for k, v in prod.items() if k in declared)
    assert "cpus_per_task" not in yaml.safe_load(
        (ROOT / "profiles" / "slurm" / "config.yaml").read_text())["default-resources"]


def test_failed_job_was_retried_without_loss_or_duplication(runs):
    _ok(runs)
    summary_jobs = [j for j in runs["jobs"] if j["comment"].startswith("rule_summary")]
    states = [j["state"] for j in sorted(summary_jobs, key=lambda j: int(j["id"]))]
    # attempt 1 was killed by SLURM for exceeding its 20 MB, attempt 2 succeeded
    assert len(states) == 2 and states[0] in {"FAILED", "OUT_OF_MEMORY"} \
        and states[1] == "COMPLETED", summary_jobs
    # every other job ran exactly once
    others = Counter(j["comment"] for j in runs["jobs"] if not j["comment"].startswith("rule_summary"))
    assert all(n == 1 for n in others.values()), others
    # one row per model, none lost, none duplicated
    summary = pd.read_csv(runs["slurm_dir"] / "results" / "summary.csv")
    assert len(summary) == 2 and not summary.duplicated(["dataset", "architecture", "defense", "seed"]).any()
    # SLURM's own record of the two attempts (jobcomp/filetxt)
    done = {r["JobId"]: r["JobState"] for r in runs["completed"]}
    assert [done.get(j["id"]) for j in sorted(summary_jobs, key=lambda j: int(j["id"]))] \
        == states
    # nothing is left incomplete or to be done
    dry = runs["dry"]
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, dry.stderr[-3000:]
