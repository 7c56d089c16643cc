"""A dataset's identity is its stamp (atat.data.manifest.write_stamp): the manifest's checksum,
not a folder's mtime. The unit tests here; through Snakemake on the tiny config (emptying the
folder reruns nothing and costs no trained model, a job that would read a broken dataset is
stopped before any job starts, the README's restore command rebuilds the same stamp) below,
marked slow."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from atat.data.manifest import (DatasetFormatError, check_stamp, dataset_folder, stamp_path,
                                stamp_problems, write_stamp)
from atat.data.synthfaces import generate_synthfaces

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(n_private_identities=3, n_public_identities=2, images_per_identity=4,
             public_images_per_identity=2, resolution=16, seed=5, progress=False)


@pytest.fixture
def dataset(tmp_path):
    folder = tmp_path / "datasets" / "synthfaces"
    generate_synthfaces(folder, **SMALL)
    return folder, write_stamp(folder)


def test_the_stamp_sits_next_to_the_folder_and_records_every_root(dataset):
    folder, stamp = dataset
    assert stamp == stamp_path(folder) == folder.parent / "synthfaces.dataset.json"
    assert dataset_folder(stamp) == folder
    text = stamp.read_text()
    assert '"private"' in text and '"public"' in text and "manifest.csv" in text
    check_stamp(stamp)  # a fresh dataset matches


def test_a_rebuilt_dataset_has_the_same_stamp_bytes(dataset, tmp_path):
    folder, stamp = dataset
    again = tmp_path / "elsewhere" / "synthfaces"
    generate_synthfaces(again, **SMALL)
    assert write_stamp(again).read_bytes() == stamp.read_bytes()


@pytest.mark.parametrize("damage,words", [
    ("empty", ["manifest.csv: missing"]),
    ("delete", ["does not match its stamp", "missing"]),
    ("truncate", ["private/total_bytes"]),
    ("manifest", ["private/manifest.csv"]),
])
def test_a_folder_that_no_longer_matches_its_stamp_is_named_with_the_remedy(dataset, damage,
                                                                             words):
    folder, stamp = dataset
    image = sorted((folder / "private").rglob("*.png"))[0]
    if damage == "empty":  # find <folder> -mindepth 1 -delete
        for child in folder.iterdir():
            shutil.rmtree(child)
    elif damage == "delete":
        image.unlink()
    elif damage == "truncate":
        image.write_bytes(image.read_bytes()[:20])
    else:
        manifest = folder / "private" / "manifest.csv"
        manifest.write_text(manifest.read_text().replace("\n", "\r\n"))
    with pytest.raises(DatasetFormatError) as info:
        check_stamp(stamp)
    msg = str(info.value)
    for word in words + [str(folder), str(stamp), f"snakemake {stamp} --force"]:
        assert word in msg, (word, msg)
    assert stamp_problems([stamp]) == [msg]


def test_a_missing_folder_is_found_by_the_cheap_check_too(dataset):
    folder, stamp = dataset
    shutil.rmtree(folder)
    assert "the dataset folder is missing" in stamp_problems([stamp], files=False)[0]
    assert stamp_problems([folder.parent / "absent.dataset.json"]) == []  # not built yet


# --------------------------------------------------------------------------------------------
# through Snakemake, on the tiny config
# --------------------------------------------------------------------------------------------
MODEL = "results/models/synthfaces/resnet18/nodef/seed0"
DATASET = "resources/datasets/synthfaces"
STAMP = f"{DATASET}.dataset.json"


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """The README's / `make demo`'s run command (its rerun policy included) on the tiny config."""
    cmd = [sys.executable, "-m", "snakemake", *args, "-s", str(ROOT / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(ROOT / "config" / "demo.yaml"),
           str(ROOT / ".test" / "tiny" / "config.yaml"), "--cores", "2", "--keep-going",
           "--rerun-incomplete", "--rerun-triggers", "mtime", "params", "input", "software-env",
           "--set-threads", "train_model=1"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1200)


def fingerprint(workdir: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns)
            for p in (workdir / MODEL).iterdir() if p.is_file()}


@pytest.mark.slow
def test_an_emptied_dataset_costs_no_trained_model_and_is_restored_without_retraining(
        tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    targets = (f"{MODEL}/model.pt", f"{MODEL}/metrics.json")
    first = snakemake(work, *targets)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    trained = fingerprint(work)
    stamp = (work / STAMP).read_bytes()

    # the careless user: the folder emptied (its mtime changes), then the README's command
    subprocess.run(["find", str(work / DATASET), "-mindepth", "1", "-delete"], check=True)
    again = snakemake(work, *targets)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "Nothing to be done" in again.stdout + again.stderr
    assert f"{DATASET} does not match its stamp" in again.stderr  # said, not silent
    assert fingerprint(work) == trained

    # a job that must run (forced here) and reads the broken dataset: stopped before any job
    # starts, so Snakemake never deletes the model it would have replaced
    forced = snakemake(work, *targets, "--forcerun", "train_model")
    out = forced.stdout + forced.stderr
    assert forced.returncode != 0
    assert "does not match its stamp" in out and "No job was started" in out, out[-3000:]
    assert f"snakemake {STAMP} --force" in out
    assert fingerprint(work) == trained

    # the remedy the message names: the same dataset, the same stamp, nothing retrained
    restore = snakemake(work, STAMP, "--force")
    assert restore.returncode == 0, restore.stdout[-3000:] + restore.stderr[-3000:]
    assert (work / STAMP).read_bytes() == stamp
    dry = snakemake(work, *targets, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout
    assert "does not match its stamp" not in dry.stderr

    # the folder removed altogether: nothing is lost, and it is said
    shutil.rmtree(work / DATASET)
    gone = snakemake(work, *targets)
    assert gone.returncode == 0 and fingerprint(work) == trained
    assert "the dataset folder is missing" in gone.stderr

    # folder and stamp gone, and a new model wanted beside the finished one: rebuilding the
    # dataset in the same run would rerun the finished model too; stopped, with the remedy
    (work / STAMP).unlink()
    new_model = MODEL.replace("/nodef/", "/atat/") + "/model.pt"
    both = snakemake(work, *targets, new_model)
    out = both.stdout + both.stderr
    assert both.returncode != 0 and "would rerun after it" in out, out[-3000:]
    assert f"`snakemake {STAMP}`" in out and "No job was started" in out
    assert fingerprint(work) == trained
    alone = snakemake(work, STAMP)  # the remedy: the same stamp, so only the new model is planned
    assert alone.returncode == 0 and (work / STAMP).read_bytes() == stamp
    plan = snakemake(work, *targets, new_model, "-n", "--quiet", "rules")
    assert plan.returncode == 0, plan.stderr[-3000:]
    counts = {tuple(line.split()) for line in plan.stdout.splitlines()   # the job-stats rows
              if len(line.split()) == 2 and line.split()[0] in ("train_model", "synthfaces",
                                                                 "total")}
    assert counts == {("train_model", "1"), ("total", "1")}, plan.stdout


def test_the_demo_and_the_profile_share_the_rerun_policy_without_the_code_trigger():
    """Decided once (profiles/slurm/config.yaml's comment): mtime with recorded checksums,
    params, input set, software environment; an edited adapter script alone reruns nothing."""
    import yaml

    policy = ["mtime", "params", "input", "software-env"]
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["rerun-triggers"] == policy
    overlay = yaml.safe_load((ROOT / "profiles" / "slurm-test" / "config.yaml").read_text())
    assert "rerun-triggers" not in overlay  # stacked on the real profile: the same policy
    demo = [line.split() for line in (ROOT / "Makefile").read_text().splitlines()
            if "snakemake all --configfile config/demo.yaml" in line]
    assert len(demo) == 1
    words = demo[0]
    i = words.index("--rerun-triggers")
    assert words[i + 1:i + 1 + len(policy)] == policy and words[i + 1 + len(policy)].startswith("-")
