"""Inversion jobs split by class range (inversion.classes_per_job, issue 43 item 2) and the
inversion precision (inversion.precision, item 3): the parts of any split merge into the bytes
the job over every class writes; the attacks run under the configured precision and record it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import yaml

from atat.base import io
from atat.plan.config import inversion_params, inversion_shards, load_config, validate_config

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ("per_image.csv", "best_images.pt", "final_w.pt")


def _config(*overlays):
    cfg = load_config(ROOT / "config" / "config.yaml", *overlays)
    validate_config(cfg)
    return cfg


# ------------------------------------------------------------------ the plan
def test_paper_config_splits_every_attack_into_ranges_that_tile_its_classes():
    cfg = _config()
    per_job = cfg["inversion"]["classes_per_job"]
    for ds, n in (("facescrub", 530), ("celeba", 1000)):
        for attack in ("ppa", "ifgmi"):
            shards = inversion_shards(cfg, ds, "resnet152", "nodef", attack)
            assert shards[0][0] == 0 and shards[-1][1] == n
            assert all(a == b for (_, a), (b, _) in zip(shards, shards[1:]))
            assert max(b - a for a, b in shards) == per_job[attack] < n
    # PPDG attacks 75 seeded random classes (an override): ranges of its 75
    ppdg = inversion_shards(cfg, "facescrub", "resnet152", "nodef", "ppdg")
    assert ppdg[-1][1] == 75 and len(ppdg) == -(-75 // per_job["ppdg"])
    # BiDO** is attacked on 75 classes by PPA too (paper D.1)
    assert inversion_shards(cfg, "facescrub", "resnet152", "bido_lx1e3", "ppa")[-1][1] == 75


def test_demo_keeps_one_job_per_model_and_attack_and_null_means_one_range():
    demo = _config(ROOT / "config" / "demo.yaml")
    for attack in ("ppa", "ifgmi", "ppdg"):
        shards = inversion_shards(demo, "synthfaces", "resnet18", "nodef", attack)
        assert len(shards) == 1 and shards[0][0] == 0
    cfg = _config()
    cfg["inversion"]["classes_per_job"] = {"ppa": None}
    assert inversion_shards(cfg, "facescrub", "resnet152", "nodef", "ppa") == [(0, 530)]
    cfg["inversion"]["classes_per_job"] = {"ppa": 200}
    assert inversion_shards(cfg, "facescrub", "resnet152", "nodef", "ppa") == [
        (0, 200), (200, 400), (400, 530)]


@pytest.mark.parametrize("bad", [0, -3, 2.5, "all"])
def test_classes_per_job_is_checked_by_the_schema(tmp_path, bad):
    from atat.plan.config import ConfigError

    overlay = tmp_path / "bad.yaml"
    overlay.write_text(yaml.safe_dump({"inversion": {"classes_per_job": {"ppa": bad}}}))
    with pytest.raises(ConfigError, match="classes_per_job"):
        _config(overlay)


def test_precision_is_a_checked_config_key_in_every_jobs_params(tmp_path):
    from atat.plan.config import ConfigError

    cfg = _config()
    assert cfg["inversion"]["precision"] == "tf32"       # the authors' setting (config comment)
    for attack in ("ppa", "ifgmi", "ppdg"):
        assert inversion_params(cfg, "facescrub", "resnet152", "nodef", attack)[
            "precision"] == "tf32"
    demo = _config(ROOT / "config" / "demo.yaml")
    assert inversion_params(demo, "synthfaces", "resnet18", "nodef", "ppa")["precision"] in (
        "fp32", "tf32")
    overlay = tmp_path / "bad.yaml"
    overlay.write_text(yaml.safe_dump({"inversion": {"precision": "fp16"}}))
    with pytest.raises(ConfigError, match="precision"):
        _config(overlay)


# ------------------------------------------------------------------ the job files
N_CLASSES = 4


@pytest.fixture(scope="module")
def job_files(tmp_path_factory):
    """A dataset of 4 private classes at 16 px and random networks written as the workflow
    writes them: target model, generator pickle, evaluation model, real embeddings."""
    from atat.lab.bench import demo_config
    from atat.plan.config import defense_params
    from atat.data.synthfaces import generate_synthfaces
    from atat.training.defenses import ModelContext, build_defense
    from atat.inversion.evaluation import build_evaluation_model
    from atat.inversion.run import write_real_embeddings
    from atat.inversion.safe_pickle import save_stylegan_pickle
    from atat.inversion.stylegan2 import train_small_generator
    from atat.training.models import build_model

    d = tmp_path_factory.mktemp("inversion_job")
    res = 16
    generate_synthfaces(d / "ds", n_private_identities=N_CLASSES, n_public_identities=1,
                        images_per_identity=3, public_images_per_identity=1, resolution=res,
                        seed=1, progress=False)
    cfg = demo_config()
    torch.manual_seed(0)
    variant = defense_params(cfg, "nodef")
    defense = build_defense(variant, N_CLASSES, context=ModelContext("resnet18", res))
    model = defense.build_model(build_model("resnet18", N_CLASSES))
    io.torch_save({"format_version": 1, "model_id": "synthfaces/resnet18/nodef/seed0",
                   "architecture": "resnet18", "n_classes": N_CLASSES, "resolution": res,
                   "defense": dict(variant), "state_dict": model.state_dict(),
                   "defense_state": defense.checkpoint_state_dict()}, d / "model.pt")
    prior = train_small_generator(None, resolution=res, steps=0, batch_size=2,
                                  images=torch.zeros(2, 3, res, res), z_dim=8, w_dim=8,
                                  mapping_layers=1, channel_base=64, channel_max=8)
    save_stylegan_pickle(d / "G.pkl", prior["G_ema"], G=prior["G"], D=prior["D"])
    ev = build_evaluation_model(N_CLASSES, aux_logits=False, resolution=75)
    io.torch_save({"kind": "evaluation_model", "n_classes": N_CLASSES, "aux_logits": False,
                   "transform_input": ev.transform_input, "resolution": 75,
                   "state_dict": ev.state_dict()}, d / "evaluation.pt")
    write_real_embeddings(evaluation_path=d / "evaluation.pt", dataset_dir=d / "ds",
                          face_path=None, faces=False, out_path=d / "real_embeddings.pt")
    return d, cfg


def _params(cfg, attack, **changes):
    cfg = copy.deepcopy(cfg)
    cfg["datasets"]["synthfaces"].update(n_classes=N_CLASSES, resolution=16)
    cfg["datasets"]["synthfaces"]["synthetic"]["n_private_identities"] = N_CLASSES
    params = inversion_params(cfg, "synthfaces", "resnet18", "nodef", attack)
    # batches, lockstep groups and final-selection scoring batches that straddle classes
    small = {"ppa": dict(candidates={"num_candidates": 2, "search_space_size": 8,
                                     "batch_size": 8}, batch_size=3, steps=2, lr_milestones=[1],
                         final_selection={"samples_per_target": 1, "iterations": 2,
                                          "rrc_scale": [0.5, 0.9], "rrc_ratio": [0.8, 1.2],
                                          "flip": 0.5}),
             "ifgmi": dict(candidates={"num_candidates": 2, "search_space_size": 8,
                                       "batch_size": 8}, batch_size=4, steps=[2, 1])}[attack]
    params.update(small, targets="all", figure_resolution=8, **changes)
    return params


def _job(d, attack, params):
    return dict(attack=attack, params=params, model_path=d / "model.pt",
                generator_path=d / "G.pkl", evaluation_path=d / "evaluation.pt",
                dataset_dir=d / "ds", face_path=None, faces=False, perceptual=None,
                progress=False, real_embeddings=d / "real_embeddings.pt")


def _outputs(out: Path) -> dict:
    return dict(out_per_image=out / "per_image.csv", out_metrics=out / "metrics.json",
                out_images=out / "best_images.pt", out_latents=out / "final_w.pt")


IDS = {"dataset": "synthfaces", "architecture": "resnet18", "defense": "nodef", "seed": 0}


@pytest.mark.parametrize("attack", ["ppa", "ifgmi"])
def test_class_range_jobs_merge_into_the_bytes_of_the_job_over_every_class(job_files, tmp_path,
                                                                            attack):
    from atat.inversion.run import invert_class_range, merge_inversion, run_inversion

    d, cfg = job_files
    params = _params(cfg, attack)
    ids = {**IDS, "attack": attack}
    whole = tmp_path / "whole"
    whole.mkdir()
    run_inversion(ids=ids, **_outputs(whole), resume_dir=tmp_path / "resume_whole",
                  **_job(d, attack, params))
    assert not (tmp_path / "resume_whole").exists()
    record = json.loads((whole / "metrics.json").read_text())
    for size in (1, 3):                      # two shard sizes: 4 ranges of 1, ranges of 3 + 1
        ranges = [(a, min(a + size, N_CLASSES)) for a in range(0, N_CLASSES, size)]
        parts = []
        for a, b in reversed(ranges):        # any order
            path = tmp_path / f"part{size}_{a}-{b}.pt"
            invert_class_range(out_part=path, class_range=(a, b),
                               resume_dir=tmp_path / f"resume{size}_{a}", **_job(d, attack, params))
            assert not (tmp_path / f"resume{size}_{a}").exists()
            parts.append(io.torch_load(path))
        out = tmp_path / f"split{size}"
        out.mkdir()
        merged = merge_inversion(parts, attack=attack, params=params, ids=ids, **_outputs(out))
        for name in OUTPUTS:
            assert (out / name).read_bytes() == (whole / name).read_bytes(), (size, name)
        got = json.loads((out / "metrics.json").read_text())
        assert {k: v for k, v in got.items() if k != "seconds"} == {
            k: v for k, v in record.items() if k != "seconds"}
        assert merged["summary"]["n_classes_attacked"] == N_CLASSES
    # a gap is refused
    with pytest.raises(ValueError, match="tile"):
        merge_inversion(parts[:1] + parts[2:], attack=attack, params=params, ids=ids,
                        **_outputs(tmp_path / "gap"))


def test_a_class_range_job_resumes_from_its_own_files(job_files, tmp_path, monkeypatch):
    """A killed range job continues from its batches; the result is the same bytes."""
    from atat.inversion import core, ppa
    from atat.inversion.run import invert_class_range

    d, cfg = job_files
    params = _params(cfg, "ppa")
    first = tmp_path / "first.pt"
    invert_class_range(out_part=first, class_range=(1, 3), **_job(d, "ppa", params))
    calls = []
    real = core.optimize_w

    def dies_after_one(*args, **kwargs):
        if calls:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ppa, "optimize_w", dies_after_one)
    resume = tmp_path / "resume"
    with pytest.raises(KeyboardInterrupt):
        invert_class_range(out_part=tmp_path / "x.pt", class_range=(1, 3), resume_dir=resume,
                           **_job(d, "ppa", params))
    assert len(list(resume.glob("batch*.pt"))) == 1
    monkeypatch.setattr(ppa, "optimize_w", real)
    second = tmp_path / "second.pt"
    invert_class_range(out_part=second, class_range=(1, 3), resume_dir=resume,
                       **_job(d, "ppa", params))
    a, b = io.torch_load(first), io.torch_load(second)
    import pandas as pd

    assert torch.equal(a["final_w"], b["final_w"])
    assert pd.DataFrame(a["rows"]).equals(pd.DataFrame(b["rows"]))


def test_ppdg_class_ranges_merge_into_the_job_over_every_class(tmp_path):
    """PPDG's per-class streams and round 1's lockstep groups (2 classes here) do not depend
    on the range a class is attacked in."""
    from atat.lab.bench import demo_config, inversion_networks
    from atat.inversion import ppdg
    from atat.inversion.metrics import Evaluator
    from atat.inversion.perceptual import build_perceptual

    cfg = demo_config()
    nets = inversion_networks(cfg)
    res = int(cfg["datasets"]["synthfaces"]["resolution"])
    n = 3
    params = inversion_params(cfg, "synthfaces", "resnet18", "nodef", "ppdg")
    params.update(targets=list(range(n)), steps=2, num_inv_points=1, inv_steps=2, tune_steps=2,
                  batch_size=4, figure_resolution=8,
                  candidates={"num_candidates": 2, "search_space_size": 8, "batch_size": 8},
                  final_selection={"samples_per_target": 2, "iterations": 2, "flip": 0.5})
    torch.manual_seed(1)
    real = (torch.rand(2 * n, 3, res, res) * 2 - 1, torch.arange(n).repeat(2))
    scorer = Evaluator(nets["evaluation"], None, real=real, classes=list(range(n)))
    net = build_perceptual("public_embedding", module=nets["perceptual"])

    def run(**kw):
        return ppdg.ppdg_classes(nets["G"], nets["D"], nets["target"], params, scorer, net,
                                 progress=False, log=lambda _m: None, **kw)

    def saved(part, tmp=tmp_path / "part.pt"):  # through a file, as rule invert reads it
        io.torch_save(part, tmp)
        return io.torch_load(tmp)

    whole = ppdg.merge_ppdg([run()], params)
    split = ppdg.merge_ppdg([saved(run(class_range=r)) for r in ((2, 3), (0, 1), (1, 2))],
                            params)
    assert torch.equal(whole["final_w"], split["final_w"])
    assert whole["frame"].equals(split["frame"])
    assert json.dumps(whole["round_metrics"]) == json.dumps(split["round_metrics"])  # NaN too
    assert whole["note"] == split["note"]
    for c, v in whole["best_images"].items():
        assert torch.equal(v["image"], split["best_images"][c]["image"])


# ------------------------------------------------------------------ precision
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("attack", ["ppa", "ifgmi", "ppdg"])
def test_every_attack_optimises_under_the_configured_precision(monkeypatch, attack, precision):
    """fp32: TF32 off; tf32: PyTorch's defaults (cuDNN TF32 on). Before, PPA and IF-GMI
    forced TF32 off whatever the config and PPDG ran the process's flags."""
    from atat.lab.bench import demo_config, inversion_networks
    from atat.inversion import ifgmi, ppa, ppdg
    from atat.inversion.metrics import Evaluator
    from atat.inversion.perceptual import build_perceptual
    from atat.base.precision import tf32_disabled

    cfg = demo_config()
    nets = inversion_networks(cfg)
    res = int(cfg["datasets"]["synthfaces"]["resolution"])
    params = inversion_params(cfg, "synthfaces", "resnet18", "nodef", attack)
    params.update(targets=[0], steps=[1] if attack == "ifgmi" else 1, figure_resolution=8,
                  candidates={"num_candidates": 2, "search_space_size": 4, "batch_size": 4},
                  precision=precision, num_rounds=1)
    if attack != "ifgmi":
        params["final_selection"] = {"samples_per_target": 1, "iterations": 1, "flip": 0.5}
    real = (torch.rand(2, 3, res, res) * 2 - 1, torch.tensor([0, 0]))
    scorer = Evaluator(nets["evaluation"], None, real=real, classes=[0])
    seen = []
    module, name = {"ppa": (ppa, "optimize_w"), "ifgmi": (ifgmi, "optimize_stage"),
                    "ppdg": (ppdg, "optimize_w")}[attack]
    original = getattr(module, name)

    def spy(*args, **kwargs):
        seen.append(tf32_disabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    before = tf32_disabled()
    if attack == "ppa":
        ppa.run_ppa(nets["G"], nets["target"], params, scorer, progress=False)
    elif attack == "ifgmi":
        ifgmi.run_ifgmi(nets["G"], nets["target"], params, scorer, progress=False,
                        log=lambda _m: None)
    else:
        net = build_perceptual("public_embedding", module=nets["perceptual"])
        ppdg.run_ppdg(nets["G"], nets["D"], nets["target"], params, scorer, net,
                      progress=False, log=lambda _m: None)
    assert seen and all(s == (precision == "fp32") for s in seen)
    assert tf32_disabled() == before                       # restored afterwards


def test_the_record_names_the_precision(job_files, tmp_path):
    from atat.inversion.run import run_inversion

    d, cfg = job_files
    params = _params(cfg, "ppa", precision="tf32")
    run_inversion(ids={**IDS, "attack": "ppa"}, **_outputs(tmp_path), **_job(d, "ppa", params))
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["precision"] == "tf32" and record["params"]["precision"] == "tf32"
    assert record["tf32_active"] is False                  # CPU: TF32 does not exist
    bad = _params(cfg, "ppa", precision="fp16")
    with pytest.raises(ValueError, match="inversion.precision"):
        run_inversion(ids={**IDS, "attack": "ppa"}, **_outputs(tmp_path / "bad"),
                      **_job(d, "ppa", bad))


# ------------------------------------------------------------------ through the workflow
@pytest.mark.slow
def test_tiny_workflow_merges_class_range_jobs_into_the_bytes_of_one_job(tmp_path):
    """.test/tiny through Snakemake: PPA and IF-GMI of a model as jobs of one class each
    (rule invert_shard) merged by rule invert, then the same outputs by one job over every
    class (forced): the same bytes."""
    import subprocess
    import sys

    def snakemake(*args, overlay):
        cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
               str(tmp_path), "--configfile", str(ROOT / "config" / "demo.yaml"),
               str(ROOT / ".test" / "tiny" / "config.yaml"), str(tmp_path / overlay),
               "--cores", "2", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc

    for name, per_job in (("split.yaml", 1), ("whole.yaml", None)):
        (tmp_path / name).write_text(yaml.safe_dump(
            {"inversion": {"classes_per_job": {"ppa": per_job, "ifgmi": per_job}}}))
    model = "results/inversion/synthfaces/resnet18/nodef/seed0"
    targets = [f"{model}/{a}/per_image.csv" for a in ("ppa", "ifgmi")]
    snakemake(*targets, overlay="split.yaml")
    split = {}
    for attack in ("ppa", "ifgmi"):
        d = tmp_path / model / attack
        assert sorted(p.name for p in (d / "parts").iterdir()) == ["classes0-1.pt",
                                                                  "classes1-2.pt"]
        split[attack] = {n: (d / n).read_bytes() for n in OUTPUTS}
        split[attack]["metrics"] = json.loads((d / "metrics.json").read_text())
    assert not list((tmp_path / "results" / ".resume").rglob("*.pt"))  # progress spent
    snakemake(*targets, "--forcerun", "invert", overlay="whole.yaml")
    for attack in ("ppa", "ifgmi"):
        d = tmp_path / model / attack
        for n in OUTPUTS:
            assert (d / n).read_bytes() == split[attack][n], (attack, n)
        whole = json.loads((d / "metrics.json").read_text())
        drop = ("seconds",)
        assert ({k: v for k, v in whole.items() if k not in drop}
                == {k: v for k, v in split[attack]["metrics"].items() if k not in drop})
