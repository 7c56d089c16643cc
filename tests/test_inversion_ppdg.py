"""Tests for atat.inversion.ppdg (docs/sources.md#ppdg) on tiny networks."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import atat.inversion.ppdg as ppdg
from atat.inversion.core import SCORE_COLUMNS, render
from atat.inversion.perceptual import EmbeddingFeatures
from atat.inversion.ppdg import (
    ct_loss,
    mmd_loss,
    project_joint,
    project_pointwise,
    run_ppdg,
    tune_generator,
)
from atat.inversion.stylegan2 import Discriminator, Generator

N_CLASSES = 4


def _G(seed=0) -> Generator:
    torch.manual_seed(seed)
    G = Generator(z_dim=16, w_dim=16, img_resolution=16, mapping_kwargs=dict(num_layers=1),
                  synthesis_kwargs=dict(channel_base=128, channel_max=16))
    with torch.no_grad():  # non-zero noise strengths so noise buffers matter
        for n, p in G.named_parameters():
            if n.endswith("noise_strength"):
                p.fill_(0.1)
    return G.eval().requires_grad_(False)


def _D(seed=1) -> Discriminator:
    torch.manual_seed(seed)
    return Discriminator(img_resolution=16, channel_base=128, channel_max=16,
                         epilogue_kwargs=dict(mbstd_group_size=None)).eval().requires_grad_(False)


def _target(seed=2) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(32, N_CLASSES)).eval()


def _perceptual(seed=3) -> EmbeddingFeatures:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.LeakyReLU(0.2),
                        nn.AdaptiveAvgPool2d(4), nn.Flatten())
    return EmbeddingFeatures(net)


class FakeScorer:
    """Deterministic stand-in for the evaluation model + face embedding."""

    def __init__(self, seed=4, fail_on_class=None):
        torch.manual_seed(seed)
        self.head = nn.Linear(3 * 4 * 4, N_CLASSES)
        self.fail_on_class = fail_on_class
        self.calls = []

    @torch.no_grad()
    def __call__(self, images, targets):
        self.calls.append(targets.tolist())
        if self.fail_on_class is not None and int(targets[0]) == self.fail_on_class:
            raise RuntimeError("simulated crash")
        logits = self.head(F.adaptive_avg_pool2d(images, 4).flatten(1))
        top5 = logits.topk(min(5, N_CLASSES), dim=1).indices
        return {"correct_top1": (logits.argmax(1) == targets).float(),
                "correct_top5": (top5 == targets[:, None]).any(1).float(),
                "evalconf": logits.softmax(1).gather(1, targets[:, None]).squeeze(1),
                "dist_face": images.square().mean(dim=(1, 2, 3)),
                "dist_eval": torch.full((len(images),), float("nan"))}


def _params(**over):
    p = {"candidates": {"num_candidates": 4, "search_space_size": 12, "batch_size": 6,
                        "horizontal_flip": True, "truncation_psi": 0.5, "truncation_cutoff": 8},
         "batch_size": 2, "steps": 2, "lr": 0.005, "betas": [0.1, 0.1], "loss": "poincare",
         "rrc_scale": [0.9, 1.0], "rrc_ratio": [1.0, 1.0], "num_rounds": 2,
         "measure": "pointwise", "num_inv_points": 2, "inv_steps": 4, "tune_steps": 3,
         "tune_lr": 3e-3, "final_selection": {"samples_per_target": 4, "iterations": 2,
                                              "flip": 0.5},
         "perceptual": "public_embedding", "targets": [2, 1], "attack": "ppdg", "seed": 42,
         "figure_resolution": 8, "generator": "tiny", "center_crop": None,
         "dataset_kind": "synthfaces", "n_classes": N_CLASSES, "input_resolution": 16}
    p.update(over)
    return p


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------ docs/sources.md#ppdg losses
def _mmd_loop(x, y, kernel_mul=2.0, kernel_num=5):
    z = torch.cat([x, y]).double()
    n, total = len(x), len(x) + len(y)
    d2 = [[float(((z[i] - z[j]) ** 2).sum()) for j in range(total)] for i in range(total)]
    b = sum(map(sum, d2)) / (total * total - total) / kernel_mul ** (kernel_num // 2)
    k = [[sum(math.exp(-d2[i][j] / (b * kernel_mul ** q)) for q in range(kernel_num))
          for j in range(total)] for i in range(total)]

    def mean(rows, cols):
        return sum(k[i][j] for i in rows for j in cols) / (len(rows) * len(cols))

    xs, ys = range(n), range(n, total)
    return mean(xs, xs) - mean(xs, ys) - mean(ys, xs) + mean(ys, ys)


def test_mmd_identical_shifted_and_loop():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, generator=g)
    assert float(mmd_loss(x, x.clone())) == pytest.approx(0.0, abs=1e-6)
    shifted = float(mmd_loss(x, x + 1.5))
    assert shifted > 0.01
    y = torch.randn(3, 7, generator=g) + 0.5
    assert float(mmd_loss(x, y)) == pytest.approx(_mmd_loop(x, y), rel=1e-5, abs=1e-6)
    # all points equal: no NaN from a zero bandwidth
    same = torch.ones(2, 3)
    assert float(mmd_loss(same, same)) == 0.0
    # differentiable w.r.t. the synthetic set
    xr = x.clone().requires_grad_(True)
    mmd_loss(xr, y).backward()
    assert torch.isfinite(xr.grad).all() and xr.grad.abs().sum() > 0


def test_ct_hand_computation_2x2():
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])   # sources (synthetic)
    y = torch.tensor([[1.0, 1.0], [2.0, 0.0]])   # targets (pseudo-private)
    # sim[i][j] = y_i . x_j
    sim = [[1.0, 2.0], [2.0, 0.0]]
    cos = [[1 / math.sqrt(2), 1 / math.sqrt(2)], [1.0, 0.0]]
    cost = [[1 - c for c in row] for row in cos]
    # s: softmax over targets i (column-wise), t: softmax over sources j (row-wise)
    s = [[math.exp(sim[i][j]) / sum(math.exp(sim[k][j]) for k in range(2)) for j in range(2)]
         for i in range(2)]
    t = [[math.exp(sim[i][j]) / sum(math.exp(sim[i][k]) for k in range(2)) for j in range(2)]
         for i in range(2)]
    fwd = sum(sum(cost[i][j] * s[i][j] for i in range(2)) for j in range(2)) / 2
    bwd = sum(sum(cost[i][j] * t[i][j] for j in range(2)) for i in range(2)) / 2
    expected = 0.5 * fwd + 0.5 * bwd
    assert float(ct_loss(x, y)) == pytest.approx(expected, rel=1e-6)
    assert float(ct_loss(y, y)) < float(ct_loss(x, y))


# ------------------------------------------------------------------ docs/sources.md#ppdg projection
def test_schedule_matches_spec():
    lr, noise = ppdg._schedule(0, 100, 0.01, 0.25, 0.05, 0.75, 0.05, 2.0)
    assert lr == 0.0 and noise == pytest.approx(2.0 * 0.05)
    lr, noise = ppdg._schedule(50, 100, 0.01, 0.25, 0.05, 0.75, 0.05, 2.0)
    assert lr == pytest.approx(0.01) and noise == pytest.approx(0.1 * (1 - 0.5 / 0.75) ** 2)
    lr, noise = ppdg._schedule(90, 100, 0.01, 0.25, 0.05, 0.75, 0.05, 2.0)
    assert lr == pytest.approx(0.01 * (0.5 - 0.5 * math.cos(math.pi * 0.4))) and noise == 0.0


def test_project_pointwise_reduces_distance():
    G, D, perc = _G(), _D(), _perceptual()
    torch.manual_seed(5)
    w_avg, _ = ppdg._w_stats(G, 600, 123)
    w_true = G.mapping(torch.randn(2, 16), None)[:, :1]
    target = render(G, w_true)
    g_before, d_before = _state(G), _state(D)
    pivots = project_pointwise(G, D, target, perc, steps=60)
    assert pivots.shape == (2, 1, 16) and not pivots.requires_grad
    assert _same(g_before, _state(G)) and _same(d_before, _state(D))  # copies only
    with torch.no_grad():
        start = perc.distance(render(G, w_avg.repeat(2, 1, 1)), target)
        end = perc.distance(render(G, pivots), target)
    assert torch.all(end < 0.7 * start), (start, end)


@pytest.mark.parametrize("measure", ["mmd", "ct"])
def test_project_joint_reduces_loss(measure):
    G, D, perc = _G(), _D(), _perceptual()
    torch.manual_seed(6)
    w_true = G.mapping(torch.randn(3, 16), None)[:, :1]
    target = render(G, w_true)
    w_avg, _ = ppdg._w_stats(G, 600, 123)
    pivots = project_joint(G, D, target, perc, measure, steps=40)
    assert pivots.shape == (3, 1, 16)
    fn = mmd_loss if measure == "mmd" else ct_loss
    with torch.no_grad():
        ft = perc.features(target)
        start = fn(perc.features(render(G, w_avg.repeat(3, 1, 1))), ft)
        end = fn(perc.features(render(G, pivots)), ft)
    assert end < start
    with pytest.raises(ValueError):
        project_joint(G, D, target, perc, "pointwise", steps=1)


def test_d_loss_falls_back_when_group_does_not_divide():
    torch.manual_seed(7)
    D = Discriminator(img_resolution=16, channel_base=128, channel_max=16,
                      epilogue_kwargs=dict(mbstd_group_size=2)).eval()
    imgs = torch.randn(3, 3, 16, 16)
    loss = ppdg._d_loss(D, imgs)
    expected = torch.cat([F.softplus(-D(imgs[i:i + 1])) for i in range(3)]).mean()
    torch.testing.assert_close(loss, expected)


# ----------------------------------------------------------------- docs/sources.md#ppdg fine-tuning
@pytest.mark.parametrize("measure", ["pointwise", "mmd", "ct"])
def test_tune_generator(measure):
    G, perc = _G(), _perceptual()
    torch.manual_seed(8)
    w = G.mapping(torch.randn(3, 16), None)[:, :1]
    images = render(_G(seed=9), w)
    before = _state(G)
    losses = tune_generator(G, w, images, perc, measure, steps=6, lr=1e-2)
    after = _state(G)
    assert len(losses) == 6 and losses[-1] < losses[0]
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    buffers = {k for k, _ in G.named_buffers()}
    assert any(k.startswith("synthesis.") for k in changed)
    assert not (changed & buffers)  # noise_const, w_avg, resample filters untouched
    assert not any(k.startswith("mapping.") for k in changed)  # pivots fixed: no gradient
    assert G.training  # left in train mode (docs/sources.md#ppdg)
    assert not any(p.requires_grad for p in G.parameters())


# ------------------------------------------------------------------ docs/sources.md#ppdg driver
def test_run_ppdg_structure_and_original_untouched(monkeypatch):
    G, D, tm, perc = _G(), _D(), _target(), _perceptual()
    g0, d0, t0 = _state(G), _state(D), _state(tm)
    seen = []          # (class, synthesis state, the generator copy itself) at each candidate search
    tuned = {}         # class -> generator state right after tuning
    real_cs, real_tune = ppdg.candidate_search, ppdg.tune_generator

    w_avg_moves = []

    def spy_cs(Gc, *a, **k):
        seen.append((a[1][0], _state(Gc), Gc))   # the object, not id(): a freed copy's id can be reused
        before = Gc.mapping.w_avg.clone()
        out = real_cs(Gc, *a, **k)
        w_avg_moves.append(not torch.equal(before, Gc.mapping.w_avg))
        return out

    def spy_tune(Gc, *a, **k):
        out = real_tune(Gc, *a, **k)
        tuned[len(seen)] = _state(Gc)
        return out

    monkeypatch.setattr(ppdg, "candidate_search", spy_cs)
    monkeypatch.setattr(ppdg, "tune_generator", spy_tune)
    scorer = FakeScorer()
    logs = []
    # the per-class path (the original's order of work, docs/sources.md#ppdg); the shared round-1
    # search and the lockstep are checked against it below
    out = run_ppdg(G, D, tm, _params(), scorer, perc, log=logs.append, share_search=False,
                   lockstep=False)

    # original networks untouched
    assert _same(g0, _state(G)) and _same(d0, _state(D)) and _same(t0, _state(tm))
    assert not G.training
    # two classes x two rounds, classes ascending; each class starts from a fresh copy of G
    assert [c for c, _, _ in seen] == [1, 1, 2, 2]
    for r1, r2 in ((0, 1), (2, 3)):
        assert _same(seen[r1][1], g0)                      # round 1: the original G
        assert seen[r1][2] is seen[r2][2]                  # same per-class copy
        # round 2 uses the tuned G (w_avg nudged once by the train-mode mapping call)
        tuned_state = tuned[r1 + 1]
        assert not _same(seen[r2][1], g0)
        assert _same({k: v for k, v in seen[r2][1].items() if k != "mapping.w_avg"},
                     {k: v for k, v in tuned_state.items() if k != "mapping.w_avg"})
    assert seen[0][2] is not seen[2][2]
    # eval-mode G in round 1; the tuned G stays in train mode, so round 2's mapping call
    # nudges w_avg once (docs/sources.md#ppdg)
    assert w_avg_moves == [False, True, False, True]

    frame = out["frame"]
    assert list(frame.columns) == ["class", *SCORE_COLUMNS, "img_absmax"]
    assert len(frame) == 8 and sorted(frame["class"].unique()) == [1, 2]
    assert out["targets"] == [1, 2]
    assert out["final_w"].shape == (8, 1, 16) and out["final_targets"].tolist() == [1] * 4 + [2] * 4
    assert set(out["best_images"]) == {1, 2}
    img = out["best_images"][1]["image"]
    assert img.dtype == torch.uint8 and img.shape == (3, 8, 8)
    rm = out["round_metrics"]
    assert [r["round"] for r in rm] == [1, 2]
    # last round's metrics = mean over targets of per-target means of the frame
    per_target = frame.groupby("class")[["correct_top1", "evalconf", "dist_face"]].mean().mean()
    assert rm[1]["attacc1"] == pytest.approx(per_target["correct_top1"])
    assert rm[1]["evalconf"] == pytest.approx(per_target["evalconf"])
    assert rm[1]["dist_face"] == pytest.approx(per_target["dist_face"])
    assert math.isnan(rm[1]["dist_eval"])
    assert "measure=pointwise" in out["note"] and "rounds=2" in out["note"]
    # final_w of each class is the final selection order: scored by the target model
    assert all(len(s) == 4 for s in scorer.calls[-2:])


@pytest.mark.parametrize("measure", ["mmd", "ct"])
def test_run_ppdg_distribution_measures_without_d(measure):
    logs = []
    out = run_ppdg(_G(), None, _target(), _params(measure=measure, targets=[3]), FakeScorer(),
                   _perceptual(), log=logs.append)
    assert len(out["frame"]) == 4 and out["targets"] == [3]
    assert any("no discriminator" in m for m in logs)
    assert f"measure={measure}" in out["note"] and "D-term=off" in out["note"]


def test_default_steps_by_measure(monkeypatch):
    got = {}

    def fake_attack(G, Dp, tm, cls, params, scorer, perc, *, device, measure, inv_steps,
                    tune_steps, log, round1=None):
        got[measure] = (inv_steps, tune_steps)
        raise StopIteration

    monkeypatch.setattr(ppdg, "_attack_class", fake_attack)
    for measure in ("pointwise", "mmd", "ct"):
        with pytest.raises(StopIteration):
            run_ppdg(_G(), None, _target(), _params(measure=measure, inv_steps=None,
                                                    tune_steps=None),
                     FakeScorer(), _perceptual(), log=lambda m: None)
    assert got == {"pointwise": (300, 150), "mmd": (100, 150), "ct": (150, 25)}
    with pytest.raises(ValueError):
        run_ppdg(_G(), None, _target(), _params(measure="l2"), FakeScorer(), _perceptual())


def test_resume_equivalence(tmp_path):
    params = _params(targets=[0, 2, 3], num_rounds=2)
    full = run_ppdg(_G(), _D(), _target(), params, FakeScorer(), _perceptual(),
                    resume_dir=tmp_path / "full", log=lambda m: None)

    part = tmp_path / "part"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_ppdg(_G(), _D(), _target(), params, FakeScorer(fail_on_class=2), _perceptual(),
                 resume_dir=part, log=lambda m: None)
    assert sorted(p.name for p in part.iterdir() if not p.name.startswith(".")) == \
        ["class_00000.pt"]
    scorer = FakeScorer()
    logs = []
    resumed = run_ppdg(_G(), _D(), _target(), params, scorer, _perceptual(), resume_dir=part,
                       log=logs.append)
    assert any("resumed" in m for m in logs)
    assert all(c[0] != 0 for c in scorer.calls)  # class 0 was not recomputed
    pd.testing.assert_frame_equal(full["frame"], resumed["frame"])
    assert torch.equal(full["final_w"], resumed["final_w"])
    pd.testing.assert_frame_equal(pd.DataFrame(full["round_metrics"]),
                                  pd.DataFrame(resumed["round_metrics"]))
    assert full["best_images"].keys() == resumed["best_images"].keys()
    for c in full["best_images"]:
        assert torch.equal(full["best_images"][c]["image"], resumed["best_images"][c]["image"])
    # a resume directory written with other settings is refused
    with pytest.raises(ValueError, match="different PPDG settings"):
        run_ppdg(_G(), _D(), _target(), _params(targets=[0, 2, 3], steps=3), FakeScorer(),
                 _perceptual(), resume_dir=part, log=lambda m: None)


def test_config_params_are_accepted():
    from atat.plan.config import inversion_params, load_config

    for files in (("config/config.yaml",), ("config/config.yaml", "config/demo.yaml")):
        cfg = load_config(*files)
        p = inversion_params(cfg, "facescrub", "resnet18", "nodef", "ppdg")
        for key in ("candidates", "batch_size", "steps", "lr", "betas", "loss", "rrc_scale",
                    "rrc_ratio", "num_rounds", "measure", "num_inv_points", "inv_steps",
                    "tune_steps", "tune_lr", "final_selection", "targets", "seed",
                    "center_crop", "dataset_kind", "n_classes", "input_resolution",
                    "figure_resolution"):
            assert key in p, key
        assert p["measure"] in ppdg.MEASURES


def test_feature_input_area_downsamples_large_images():
    x = torch.randn(2, 3, 512, 512)
    y = ppdg._feature_input(x)
    assert y.shape == (2, 3, 256, 256)
    torch.testing.assert_close(y, F.avg_pool2d(x, 2))
    small = torch.randn(1, 3, 64, 64)
    assert ppdg._feature_input(small) is small


def test_tune_and_project_with_lpips_vgg(tmp_path):
    from torchvision.models.vgg import cfgs, make_layers

    from atat.inversion.perceptual import VGG16_CHANNELS, VGG16LPIPS

    torch.manual_seed(10)
    feats = make_layers(cfgs["D"])
    torch.save({f"features.{k}": v for k, v in feats.state_dict().items()}, tmp_path / "vgg.pth")
    torch.save({f"lin{i}.model.1.weight": torch.rand(1, c, 1, 1)
                for i, c in enumerate(VGG16_CHANNELS)}, tmp_path / "lin.pth")
    perc = VGG16LPIPS(tmp_path / "vgg.pth", tmp_path / "lin.pth")
    G = _G()
    w = G.mapping(torch.randn(2, 16), None)[:, :1]
    images = render(_G(seed=11), w)
    piv = project_pointwise(G, _D(), images, perc, steps=2, w_stats_samples=50)
    assert piv.shape == (2, 1, 16) and torch.isfinite(piv).all()
    for measure in ("pointwise", "mmd"):
        losses = tune_generator(G, piv, images, perc, measure, steps=2, lr=1e-3)
        assert len(losses) == 2 and all(math.isfinite(v) for v in losses)


# ------------------------------------------------------------------ issue 16: same work, faster
def _lockstep_params(**over):
    # 4 classes x 2 candidates, batch size 4: round 1 of classes (0, 1) and (2, 3) together
    return _params(**{"candidates": {"num_candidates": 2, "search_space_size": 12,
                                     "batch_size": 6},
                      "batch_size": 4, "targets": [3, 0, 2, 1],
                      "final_selection": {"samples_per_target": 2, "iterations": 2, "flip": 0.5},
                      **over})


def _compare(a, b, exact):
    close = (lambda x, y: torch.equal(x, y)) if exact else (
        lambda x, y: torch.allclose(x, y, rtol=1e-4, atol=1e-5))
    assert a["frame"]["class"].tolist() == b["frame"]["class"].tolist()
    for col in (*SCORE_COLUMNS, "img_absmax"):
        x = torch.tensor(a["frame"][col].to_numpy())
        y = torch.tensor(b["frame"][col].to_numpy())
        assert close(x, y) or (x.isnan().all() and y.isnan().all()), col
    assert close(a["final_w"], b["final_w"])
    assert torch.equal(a["final_targets"], b["final_targets"])
    ra, rb = pd.DataFrame(a["round_metrics"]), pd.DataFrame(b["round_metrics"])
    pd.testing.assert_frame_equal(ra, rb, check_exact=exact, rtol=1e-4)
    assert a["best_images"].keys() == b["best_images"].keys()


def test_shared_search_and_lockstep_do_the_per_class_work(monkeypatch):
    """Round 1's candidate search (untuned generator) runs once per job and gives every
    class the candidates of its own search (exact); round 1's optimisations of classes whose
    candidates fit in one batch run together, each class with its own random stream and loss
    (equal up to float rounding: the generator's grouped convolution sums in a batch-size
    dependent order on CPU). Rounds 2+ run per class on its tuned generator."""
    searches, confidences, opt_sizes = [], [], []
    real_cs, real_conf, real_opt = ppdg.candidate_search, ppdg.candidate_confidences, \
        ppdg.optimize_w

    def spy_cs(*a, **k):
        searches.append(a[2][0])
        return real_cs(*a, **k)

    def spy_conf(*a, **k):
        confidences.append(1)
        return real_conf(*a, **k)

    def spy_opt(G, tm, w, *a, **k):
        opt_sizes.append(len(w))
        return real_opt(G, tm, w, *a, **k)

    monkeypatch.setattr(ppdg, "candidate_search", spy_cs)
    monkeypatch.setattr(ppdg, "candidate_confidences", spy_conf)
    monkeypatch.setattr(ppdg, "optimize_w", spy_opt)
    p = _lockstep_params()
    run = lambda **k: run_ppdg(_G(), _D(), _target(), p, FakeScorer(), _perceptual(),  # noqa
                               log=lambda m: None, **k)
    alone = run(share_search=False, lockstep=False)
    assert searches == [0, 0, 1, 1, 2, 2, 3, 3] and not confidences
    assert opt_sizes == [2] * 8
    searches.clear(), opt_sizes.clear()
    shared = run(share_search=True, lockstep=False)
    assert searches == [0, 1, 2, 3] and len(confidences) == 1   # round 2 per class
    assert opt_sizes == [2] * 8
    _compare(alone, shared, exact=True)
    searches.clear(), confidences.clear(), opt_sizes.clear()
    together = run()
    assert searches == [0, 1, 2, 3] and len(confidences) == 1
    assert opt_sizes == [4, 2, 2, 4, 2, 2]   # round 1 of (0, 1); round 2 of 0 and 1; ...
    _compare(alone, together, exact=False)


def test_lockstep_resume_and_random_targets(tmp_path):
    p = _lockstep_params()
    full = run_ppdg(_G(), _D(), _target(), p, FakeScorer(), _perceptual(), log=lambda m: None)
    part = tmp_path / "part"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_ppdg(_G(), _D(), _target(), p, FakeScorer(fail_on_class=1), _perceptual(),
                 resume_dir=part, log=lambda m: None)
    assert sorted(x.name for x in part.glob("class_*.pt")) == ["class_00000.pt"]
    resumed = run_ppdg(_G(), _D(), _target(), p, FakeScorer(), _perceptual(), resume_dir=part,
                       log=lambda m: None)
    _compare(full, resumed, exact=False)

    class Noisy(nn.Module):   # samples at inference, as MID's bottleneck
        def __init__(self):
            super().__init__()
            self.net = _target()

        def forward(self, x):
            out = self.net(x)
            return out + 0.1 * torch.randn_like(out)

    logs = []
    noisy = run_ppdg(_G(), _D(), Noisy(), p, FakeScorer(), _perceptual(), log=logs.append)
    assert any("draws random numbers" in m for m in logs)
    _compare(run_ppdg(_G(), _D(), Noisy(), p, FakeScorer(), _perceptual(), log=lambda m: None,
                      share_search=False, lockstep=False), noisy, exact=True)
