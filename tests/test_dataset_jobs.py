"""Real datasets on a cluster: the download (rule fetch_dataset) is a local rule, on the login
node that has the network; building the image folders (rule prepare_dataset: ~90k images,
hours on 4 cores) is a cluster job with declared resources, planned like any other job."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA_SMK = ROOT / "workflow" / "rules" / "data.smk"


def rule_block(name: str) -> str:
    text = DATA_SMK.read_text()
    m = re.search(rf"^rule {name}:\n((?:[ \t]+.*\n|\n)+?)(?=^\S)", text + "\nend\n", re.M)
    assert m, f"rule {name} not in {DATA_SMK}"
    return m.group(1)


def test_download_is_local_and_the_build_is_a_cluster_job_with_resources():
    fetch, prepare = rule_block("fetch_dataset"), rule_block("prepare_dataset")
    assert re.search(r"^    localrule: True$", fetch, re.M)
    assert "localrule" not in prepare
    assert re.search(r"^    threads: 4$", prepare, re.M)
    for key in ("mem_mb", "runtime"):
        assert re.search(rf"^        {key}=", prepare, re.M), key
    # the compute job never opens a socket
    assert re.search(r"^        offline=True,", prepare, re.M)


def test_paper_dry_run_plans_the_build_as_a_submitted_job():
    """The paper config with the SLURM profile: one fetch and one build per real dataset; the
    build reads the fetch's record and carries its partition, memory and runtime."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    real = {n: d["source"] for n, d in cfg["datasets"].items() if d["source"] != "synthfaces"}
    assert len(real) == 3
    res = cfg["resources_dir"]
    targets = [f"{res}/datasets/{n}.dataset.json" for n in real]
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "-n",
                           *targets], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = re.findall(r"^(localrule|rule) (\w+):\n((?:    .*\n)+)", proc.stdout, re.M)
    by_rule: dict[str, list[str]] = {}
    for _, rule, body in jobs:
        by_rule.setdefault(rule, []).append(body)
    assert sorted(by_rule) == ["fetch_dataset", "prepare_dataset"], sorted(by_rule)
    assert len(by_rule["fetch_dataset"]) == len(set(real.values()))
    assert len(by_rule["prepare_dataset"]) == len(real)
    for body in by_rule["prepare_dataset"]:
        source = re.search(r"input: \S+/raw/(\w+)\.fetched\.json", body).group(1)
        dataset = re.search(r"wildcards: dataset=(\w+)", body).group(1)
        assert real[dataset] == source
        resources = re.search(r"resources: (.*)", body).group(1)
        assert "mem_mb=8000" in resources and "runtime=360" in resources, resources
        assert "slurm_partition=" in resources, resources
