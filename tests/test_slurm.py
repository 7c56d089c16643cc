"""The SLURM profile: its requests in dry runs (fast and slow tests below), the check of the
names it requests against a fake ``sinfo``, and the profile against a real one-node SLURM
cluster on localhost (marker ``slurm``).

For the real cluster, one module-scoped run does the work (a few minutes): the tiny config of test_workflow.py goes
through the documented command, `snakemake --profile slurm ...`, stacked with the test overlay
profiles/slurm-test (no GPU requests, small memory, one injected failure), while the same
config runs locally as the reference. The tests then check what went through sbatch, that
the outputs equal the local ones, and that the injected failure was retried without losing or
duplicating anything. slurm-wlm and munge are installed from Debian when missing; the test
is skipped, with the reason, only when that is impossible (not root, no apt-get, apt fails).
"""

from __future__ import annotations

import os
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

SNAKEMAKE = Path(sys.executable).with_name("snakemake")

# what profiles/slurm-test sets: one thread per job, so local and SLURM runs sum floats in the
# same order and produce identical numbers
THREADS = ["--set-threads", "train_model=1", "autoattack=1", "measure_hsic=1",
           "train_evaluation_model=1", "train_face_embedding=1", "train_instrument_classifier=1",
           "train_generator=1", "invert=1", "pretrain_backbone=1"]
# A targeted rebuild (the README's `snakemake --profile slurm results/tables/<table>`): data,
# both models, AutoAttack at both epsilons (one job per model), the table's own summary and the
# table, plus the whole run's summary (the retry test's injected failure; since the targeted
# rebuilds a table no longer needs it). That is every kind of job the profile routes (CPU and
# GPU rules) and keeps the test to a few minutes on 2 cores.
TARGETS = ["results/tables/table4.csv", "results/summary.csv"]


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


@pytest.mark.slurm
@pytest.mark.slow
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
    # the demo runs without a GPU (device: cpu): every job, GPU rules' included, went to the
    # CPU partition of the cluster settings (`partitions`), none to the GPU partition
    assert {j["partition"] for j in runs["jobs"]} == {"cpu"}, runs["jobs"]


@pytest.mark.slurm
@pytest.mark.slow
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


def _gpu_rules() -> set[str]:
    """Rules whose resources declare gpu= (their function or value)."""
    declared = set()
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        for rule, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", smk.read_text(), re.M):
            if re.search(r"^\s+gpu\s*=", body, re.M):
                declared.add(rule)
    return declared


def test_every_gpu_rule_has_a_block_in_both_profiles():
    """Rules declaring gpu= need a GPU block in profiles/slurm (CPUs per GPU) that leaves the
    GPU request and the partition to the rule -- no gpu, card, runtime or partition there,
    which would replace the per-job choice (a merging invert, device: cpu, the card for the
    job's memory) -- and gpu: 0 in the test overlay (the test cluster has no GPUs). No
    profile names a partition: the cluster settings' `partitions` is their one home."""
    import yaml

    declared = _gpu_rules()
    assert {"train_model", "autoattack", "invert", "invert_shard"} <= declared
    prod = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    test = yaml.safe_load((ROOT / "profiles" / "slurm-test" / "config.yaml").read_text())["set-resources"]
    for rule in declared:
        block = prod["set-resources"].get(rule, {})
        assert "cpus_per_gpu" in block, rule
        assert not {"gpu", "gpu_model", "constraint", "gres", "slurm_partition"} & set(block), \
            (rule, block)
        assert "runtime" not in block or rule == "train_generator", rule
        assert test.get(rule, {}).get("gpu") == 0 and test[rule].get("gpu_model", 0) is None, rule
    assert not any("cpus_per_task" in v for k, v in prod["set-resources"].items() if k in declared)
    assert "cpus_per_task" not in prod["default-resources"]
    for profile in ("slurm", "slurm-test"):
        text = (ROOT / "profiles" / profile / "config.yaml").read_text()
        assert not re.search(r"^\s*slurm_partition:", text, re.M), profile
    # the cluster's settings are a file of their own, not a `config:` list a --config replaces
    assert "config" not in prod


def _dry(*args: str, cwd: Path = ROOT, env: dict | None = None, timeout: int = 900):
    return subprocess.run([str(SNAKEMAKE), "-n", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)


def _job_resources(stdout: str) -> list[tuple[str, dict[str, str], str]]:
    """(rule, resources, wildcards) of every job block of a dry run's output."""
    jobs = []
    for block in stdout.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0]
        res = re.search(r"resources: (.*)", block)
        wc = re.search(r"wildcards: (.*)", block)
        if res:
            jobs.append((rule, dict(kv.split("=", 1) for kv in res.group(1).split(", ")),
                         wc.group(1) if wc else ""))
    return jobs


@pytest.mark.slow
def test_paper_dry_run_keeps_cards_under_a_limit_override_and_merges_get_no_gpu(tmp_path):
    """The paper config on the profile with `--config max_runtime_min=2500` (an override of the
    cluster file's 2880, as docs/forecast.md does): every inversion shard still asks for its
    card (the cluster settings are merged key by key), every request stays within the new
    limit, every job that merges shards asks for no GPU, every GPU job asks for a card."""
    # one training job ran out of GPU memory before: its next request is one card larger
    oom = tmp_path / "logs/train/facescrub/resnet152/nodef/seed0.attempts.log"
    oom.parent.mkdir(parents=True)
    oom.write_text("===== attempt 1 of this job started x =====\ntorch.OutOfMemoryError: CUDA "
                   "out of memory. Tried to allocate 2.00 GiB\n")
    out = _dry("--profile", "slurm", "--config", "max_runtime_min=2500", "--directory",
               str(tmp_path), "all")
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = _job_resources(out.stdout)
    train = {wc: r["gpu_model"] for rule, r, wc in jobs if rule == "train_model"
             and "arch=resnet152, defense=nodef," in wc and "dataset=facescrub" in wc}
    after_oom = [m for wc, m in train.items() if wc.endswith(" seed=0")]
    assert after_oom == ["l40s"] and set(train.values()) == {"a100_40g", "l40s"}, train
    shards = [r for rule, r, _ in jobs if rule == "invert_shard"]
    merges = [r for rule, r, _ in jobs if rule == "invert"]
    assert len(shards) > 1000 and len(merges) > 100
    assert all(r["gpu"] == "1" and r.get("gpu_model") for r in shards)
    assert max(int(r["runtime"]) for _, r, _ in jobs if "runtime" in r) <= 2500
    assert all(r["gpu"] == "0" and "gpu_model" not in r and "constraint" not in r
               for r in merges)
    # the partition follows the GPU request (cluster settings `partitions`): a merge, a CPU
    # rule's job -> cpu; every job that requests a GPU -> gpu
    assert {r["slurm_partition"] for r in shards} == {"gpu"}
    assert {r["slurm_partition"] for r in merges} == {"cpu"}
    assert all(r["slurm_partition"] == ("gpu" if r.get("gpu") == "1" else "cpu")
               for _, r, _ in jobs), [j for j in jobs if "slurm_partition" not in j[1]][:3]
    gpu_jobs = [(rule, r) for rule, r, _ in jobs if r.get("gpu") == "1"]
    assert {rule for rule, _ in gpu_jobs} >= {"train_model", "autoattack", "invert_shard",
                                              "train_evaluation_model", "real_embeddings"}
    assert all(r.get("gpu_model") for _, r in gpu_jobs), [x for x in gpu_jobs if not x[1].get("gpu_model")][:3]
    # PPA at 1024 px (55 GB) needs the 80 GB card; AT-AT on ResNet-152 more than NoDef
    assert {r["gpu_model"] for r in shards if int(r["gpu_mem_mb"]) > 48000} == {"a100_80g"}


def test_demo_on_the_profile_requests_no_gpu(tmp_path):
    """config/demo.yaml sets device: cpu: on the profile no job asks for a GPU or a card."""
    out = _dry("--profile", "slurm", "--configfile", str(ROOT / "config" / "demo.yaml"),
               "--directory", str(tmp_path), "all")
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = _job_resources(out.stdout)
    assert len(jobs) > 100
    gpu = [(rule, r) for rule, r, _ in jobs
           if r.get("gpu", "0") != "0" or r.get("gpu_model") or r.get("constraint")]
    assert not gpu, gpu[:5]
    assert {"train_model", "invert"} <= {rule for rule, _, _ in jobs}
    assert {r.get("slurm_partition") for _, r, _ in jobs} == {"cpu"}   # nothing on the GPU one


@pytest.mark.slow
def test_paper_dry_run_on_40gb_cards_is_one_message(tmp_path):
    """With 40 GB cards only, the paper config stops before any job with one message, by rule
    and shape, with the remedies -- no traceback naming one job."""
    out = _dry("--profile", "slurm", "--config", "gpu_cards=a100_40g=40000", "--directory",
               str(tmp_path), "all")
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "need more memory than the largest card of gpu_cards, a100_40g (40000 MB)" in text
    assert "nothing was submitted" in text and "Traceback" not in text
    assert re.search(r"invert_shard: \d+ job\(s\), ppa on resnet152 at 224 px, batch 25", text)
    assert "inversion.ppa.batch_size" in text and "a larger card in gpu_cards" in text
    assert len(text.splitlines()) < 200


@pytest.mark.slow
def test_every_paper_gpu_job_asks_for_what_the_plan_checked(tmp_path):
    """The paper DAG built through Snakemake's API: each GPU job's runtime, GPU memory and card,
    as Snakemake evaluates them per job (common.smk's resource functions, attempt 1), equal the
    one-pass plan the workflow checks before any job (planned_gpu_requests/planned_gpu_memory
    over planned_gpu_jobs), job by job, and the plan lists exactly the DAG's GPU jobs."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (ConfigSettings, DAGSettings, OutputSettings,
                                          ResourceSettings)

    with SnakemakeApi(OutputSettings(quiet=None)) as api:
        wf_api = api.workflow(resource_settings=ResourceSettings(cores=1),
                              config_settings=ConfigSettings(),
                              snakefile=ROOT / "Snakefile", workdir=tmp_path)
        wf_api.dag(DAGSettings(targets={"all"}))
        wf = wf_api._workflow
        wf._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        wf._build_dag()
        g = wf.globals
        jobs = g["planned_gpu_jobs"]()
        key = [(rule, tuple((k, str(v)) for k, v in wc.items())) for rule, wc in jobs]
        minutes = {k: m for k, (_, _, m, _) in zip(key, g["planned_gpu_requests"]())}
        memory = {(rule, name): mb for rule, name, mb, *_ in g["planned_gpu_memory"]()}
        cards, resource = g["CARD_SIZES"], g["GPU_CARD_RESOURCE"]
        seen, by_rule = set(), Counter()
        for job in wf.dag.jobs:
            res = job.resources
            if res.get("gpu", 0) != 1:
                continue
            k = (job.rule.name, tuple((n, str(v)) for n, v in job.wildcards.items()))
            name = "/".join(v for _, v in k[1])
            assert k in minutes, k
            assert res["runtime"] == minutes[k], (k, res["runtime"], minutes[k])
            assert res["gpu_mem_mb"] == memory[(k[0], name)], k
            want = g["_pick_gpu_card"](memory[(k[0], name)], cards, 0)
            assert res[resource] == want, (k, res[resource], want)
            seen.add(k)
            by_rule[k[0]] += 1
    assert seen == set(minutes), sorted(set(minutes) - seen)[:5]
    assert by_rule["invert_shard"] > 1000 and by_rule["train_model"] > 50, by_rule


def test_retry_asks_for_more_time(tmp_path):
    """Attempt 2 of a job requests its first runtime x 1.5 (rounded up to 10 minutes)."""
    target = "results/models/synthfaces/resnet18/nodef/seed0/model.pt"
    runtime = {}
    for attempt in (1, 2):
        out = _dry("--profile", "slurm", "--configfile", str(ROOT / "config" / "demo.yaml"),
                   "--directory", str(tmp_path), "--attempt", str(attempt), target)
        assert out.returncode == 0, out.stderr[-3000:]
        runtime[attempt] = [int(r["runtime"]) for rule, r, _ in _job_resources(out.stdout)
                            if rule == "train_model"]
    assert len(runtime[1]) == 1 and runtime[2] == [-(-runtime[1][0] * 3 // 20) * 10]


def test_bad_partition_stops_before_any_submission(tmp_path):
    """Executor slurm, a fake sinfo without the cluster settings' CPU partition (and a fake
    sbatch that records its calls): the run stops in onstart naming the partition and the
    rules asking for it; sbatch is never called. (The demo runs without a GPU, so its jobs
    ask for the CPU partition.)"""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch.calls"
    (bin_dir / "sinfo").write_text("#!/bin/sh\nprintf 'cpux*|(null)|(null)\\ngpu|gpu:a100_80g:4|(null)\\n'\n")
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexit 1\n")
    for name in ("squeue", "sacct"):   # the plugin needs one of them to exist
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    target = "results/models/synthfaces/resnet18/nodef/seed0/model.pt"
    proc = subprocess.run(
        [str(SNAKEMAKE), "--profile", "slurm", "--configfile", str(ROOT / "config" / "demo.yaml"),
         "--directory", str(tmp_path / "w"), target],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    assert "partition 'cpu' does not exist (sinfo lists: cpux, gpu) -- requested by" in text, \
        text[-3000:]
    assert "train_model" in text.split("partition 'cpu' does not exist")[1].splitlines()[0]
    assert not calls.exists()


@pytest.mark.slurm
@pytest.mark.slow
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
