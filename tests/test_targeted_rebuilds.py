"""Targeted rebuilds are targeted (issue 43 item 5): the dry run of one output's files plans
the jobs of the records it reads (atat.analysis.paper.output_reads: its models in the registry) and
nothing else -- not the whole grid behind results/summary.csv. And the documented overlays
(config/overlays/*.yaml) are valid configs whose dry run plans their models only.

One DAG of `all` per config, built with Snakemake's Python API in this process
(atat.lab.target_cones); one CLI dry run checks that its cones are what `snakemake -n`
plans."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from atat.analysis import paper
from atat.plan.config import load_config
from atat.lab import target_cones as tc

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"paper": (), "demo": ("config/demo.yaml",)}
OVERLAYS = sorted((ROOT / "config" / "overlays").glob("*.yaml"))
DEMO_DOGS = ROOT / "config" / "overlays" / "demo-dogs.yaml"


def _layers(overlay: Path) -> list[Path]:
    """The config files an overlay is documented with: ``demo-*.yaml`` after demo.yaml (the
    demo's opt-in blocks), the others on config.yaml alone (the paper's subsets)."""
    demo = [ROOT / "config" / "demo.yaml"] if overlay.name.startswith("demo-") else []
    return [ROOT / "config" / "config.yaml", *demo, overlay]


@pytest.fixture(scope="module")
def dags():
    return {k: tc.build_dag([ROOT / "config" / "config.yaml", *(ROOT / f for f in files)])
            for k, files in CONFIGS.items()}


def _rules(jobs) -> Counter:
    return Counter(rule for rule, _ in jobs)


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_every_output_plans_exactly_its_registry_cone(dags, key):
    """For every output the config builds, the dry run of its files == the jobs making its
    files and its own summary + the cone of what the registry says it reads."""
    cones = tc.cones(dags[key])
    assert len(cones) >= 30  # every table and figure of the registry is checked
    for entry, (planned, expected) in cones.items():
        extra, missing = planned - expected, expected - planned
        assert not extra and not missing, (
            f"{key} {entry}: planned but not read: {dict(_rules(extra))}; "
            f"read but not planned: {dict(_rules(missing))}")


def test_the_claims_rule_reads_the_dose_response_endpoints_per_image_files(dags):
    """The demo's claims job takes the per-image files of its dose-response sweep's endpoints
    (lambda 0: the cell's NoDef; 0.16: a generated variant) straight from their invert jobs:
    the paired interval of the dose-response claim pairs them class by class."""
    dag = dags["demo"]
    ends = paper.claims_inputs(tc.plan_of(dag))["dose_per_image"]
    assert ends == [f"results/inversion/synthfaces/resnet18/{d}/seed0/ppa/per_image.csv"
                    for d in ("nodef", "atat_w0p16")]
    claims = dag.producer["results/tables/claims.csv"]
    assert {rule for rule, _ in dag.jobs_of(ends)} == {"invert"}
    assert dag.jobs_of(ends) <= dag.deps[claims]
    # the paper config sweeps no lambda: no such input
    assert paper.claims_inputs(tc.plan_of(dags["paper"]))["dose_per_image"] == []


def test_table2_of_the_paper_plans_its_models_not_the_grid(dags):
    """Table 2 on the paper config: the permuted-label models and the NoDef models of their
    cells (with the causal experiment's NoDef controls of FaceScrub ResNet-152, which its
    builder averages in), their PPA attacks and their inputs -- no AutoAttack, no other
    model, no results/summary.csv (808 jobs of 958 before)."""
    dag = dags["paper"]
    planned, _ = tc.cones(dag)["table2"]
    by_rule = _rules(planned)
    assert "autoattack" not in by_rule and "summary" not in by_rule
    trained = {files[0].split("/")[4] for rule, files in planned if rule == "train_model"}
    assert trained == {"nodef", "permuted"}
    selected = paper.summary_selection(tc.plan_of(dag), "table2")
    assert by_rule["train_model"] == len(selected) == 9  # 2 permuted, 2 + 5 NoDef
    assert by_rule["invert"] == 9  # their PPA attacks (shards: rule invert_shard)
    assert by_rule["table2"] == 1 and by_rule["output_summary"] == 1
    # Table 11 reads AutoAttack at eps 0.031 only: no inversion, no other epsilon
    planned11, _ = tc.cones(dag)["table11"]
    assert "invert" not in _rules(planned11) and "summary" not in _rules(planned11)
    assert all(f.endswith("eps0.031.json") for rule, files in planned11
               if rule == "autoattack" for f in files)


def _dry_run_jobs(workdir: Path, *args: str) -> dict[str, int]:
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
                           "--directory", str(workdir), "-n", "--forceall", "--quiet", "rules",
                           *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    block = proc.stdout.split("Job stats:", 1)[-1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", block, re.M)}


@pytest.mark.slow  # a CLI dry run from an empty directory: ~30 s on 2 busy cores
def test_the_cones_are_what_snakemake_dry_run_plans(dags, tmp_path):
    """The API's cone of Table 4 (paper config) == the Job stats of `snakemake -n` of it."""
    planned, _ = tc.cones(dags["paper"])["table4"]
    jobs = _dry_run_jobs(tmp_path, "--", "results/tables/table4.md")
    assert jobs.pop("total") == len(planned)
    assert jobs == dict(_rules(planned))


@pytest.mark.parametrize("overlay", OVERLAYS, ids=[p.stem for p in OVERLAYS])
def test_overlays_are_valid_and_plan_only_their_models(overlay):
    """Each documented overlay passes the config schema and checks, and its `all` plans its
    own models only (fewer than the paper grid's), every output's cone as registered."""
    config = load_config(*_layers(overlay))  # schema + checks
    assert config["grid"]
    dag = tc.build_dag(_layers(overlay))
    plan = tc.plan_of(dag)
    trained = _rules(dag.deps)["train_model"]
    assert trained == len(plan.runs) < 101
    for entry, (planned, expected) in tc.cones(dag).items():
        assert planned == expected, entry


def test_the_dog_breeds_are_planned_only_with_their_overlay(dags):
    """The demo plans no dog job and no Table 26 (2026-12-06); config/overlays/demo-dogs.yaml
    after demo.yaml adds exactly the dog block's jobs: the population, its prior with its
    quality instrument, evaluation model and public classifier, 18 models through AutoAttack,
    HSIC and PPA, their two reconstruction figures and Table 26 (523 = 436 + 87 jobs; the
    demo's 436 include the pretraining population and its 4 backbones -- the targets' 3 at 32 px
    and the judge's ResNet-10 at 64 px -- which the dogs share)."""
    demo = set(dags["demo"].deps)
    assert not [k for k in demo if any("synthdogs" in f or "table26" in f for f in k[1])]
    assert "table26" not in _rules(demo)
    dogs = set(tc.build_dag(_layers(DEMO_DOGS)).deps)
    assert demo <= dogs
    added = dogs - demo
    assert all(any("synthdogs" in f or "table26" in f for f in files) for _, files in added)
    assert _rules(added) == Counter({
        "train_model": 18, "autoattack": 18, "measure_hsic": 18, "invert": 18,
        "train_instrument_classifier": 4, "figure_reconstructions": 2, "synthfaces": 1,
        "train_generator": 1, "prior_quality": 1, "train_evaluation_model": 1,
        "train_face_embedding": 1, "real_embeddings": 1, "output_summary": 1,
        "output_per_image": 1, "table26": 1})
    assert len(demo) == 436 and len(dogs) == 523   # the dry runs' totals (with `all`)


def test_pilot_overlay_is_one_model_through_every_gpu_rule():
    dag = tc.build_dag([ROOT / "config" / "config.yaml",
                        ROOT / "config" / "overlays" / "pilot-cell.yaml"])
    by_rule = _rules(dag.deps)
    assert by_rule["train_model"] == 1
    for rule in ("autoattack", "measure_hsic", "train_evaluation_model", "real_embeddings"):
        assert by_rule[rule] >= 1, rule
    attacked = {files[0].split("/")[6] for rule, files in dag.deps
                if rule in ("invert", "invert_shard") and files}
    assert attacked >= {"ppa", "ifgmi", "ppdg"}, attacked
    assert paper.final_targets(tc.plan_of(dag))  # `all` builds the pilot's tables
