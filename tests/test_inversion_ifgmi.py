"""Tests for atat.inversion.ifgmi (docs/sources.md#if-gmi)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from atat.inversion import ifgmi
from atat.inversion.core import SCORE_COLUMNS, attack_transform, broadcast_w, poincare_loss
from atat.inversion.ifgmi import (
    SELECTION_NOTE,
    ifgmi_settings,
    l1_ball_projection,
    optimize_stage,
    run_ifgmi,
)
from atat.inversion.stylegan2 import Generator

N_CLASSES = 3


def _gen(seed=0) -> Generator:
    torch.manual_seed(seed)
    return Generator(z_dim=16, w_dim=16, img_resolution=16, mapping_kwargs=dict(num_layers=1),
                     synthesis_kwargs=dict(channel_base=128, channel_max=16)).eval()


def _target(seed=1) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 8 * 8, N_CLASSES)).eval()


def _params(**kw) -> dict:
    p = {"candidates": {"num_candidates": 3, "search_space_size": 12, "batch_size": 6,
                        "horizontal_flip": True, "truncation_psi": 0.5, "truncation_cutoff": 8},
         "batch_size": 2, "steps": [2, 1, 1], "lr": 0.01, "betas": [0.1, 0.1],
         "loss": "poincare", "rrc_scale": [0.9, 1.0], "rrc_ratio": [1.0, 1.0],
         "max_radius_mid": [1000, 2000, 3000], "max_radius_w": [1000, 2000, 3000],
         "targets": 2, "seed": 42, "figure_resolution": 8, "center_crop": None,
         "dataset_kind": "synthfaces", "n_classes": N_CLASSES, "input_resolution": 16}
    p.update(kw)
    return p


def image_scorer(images, targets):
    """Deterministic fake scorer: depends on the images only."""
    m = images.detach().float().mean(dim=(1, 2, 3)).cpu()
    return {"correct_top1": (m > 0).float(), "correct_top5": torch.ones(len(m)),
            "evalconf": torch.sigmoid(m), "dist_face": torch.full((len(m),), float("nan")),
            "dist_eval": m.abs()}


def _bisect_projection(v: torch.Tensor, radius: float) -> torch.Tensor:
    """Alternative: find θ >= 0 with Σ max(|v|-θ, 0) = radius by bisection (float64)."""
    a = v.abs().double()
    if a.sum() <= radius:
        return v.double()
    lo, hi = 0.0, float(a.max())
    for _ in range(200):
        mid = (lo + hi) / 2
        if (a - mid).clamp(min=0).sum() > radius:
            lo = mid
        else:
            hi = mid
    return v.double().sign() * (a - (lo + hi) / 2).clamp(min=0)


# ------------------------------------------------------------------ L1 projection
def test_l1_projection_identity_inside_and_sphere_outside():
    g = torch.Generator().manual_seed(0)
    d = torch.randn(4, 3, 5, 5, generator=g)
    norms = d.reshape(4, -1).abs().sum(1)
    big = float(norms.max()) + 1.0
    assert torch.equal(l1_ball_projection(d, big), d)
    r = float(norms.min()) / 3
    p = l1_ball_projection(d, r)
    assert p.shape == d.shape
    assert torch.allclose(p.reshape(4, -1).abs().sum(1), torch.full((4,), r), rtol=1e-5)
    # signs preserved (or zeroed), magnitudes shrink
    assert bool(((p * d) >= 0).all()) and bool((p.abs() <= d.abs() + 1e-7).all())
    # mixed batch: inside samples untouched
    mixed = torch.stack([d[0] * 1e-3, d[1]])
    pm = l1_ball_projection(mixed, r)
    assert torch.equal(pm[0], mixed[0])
    assert abs(float(pm[1].abs().sum()) - r) < 1e-5 * r
    assert torch.equal(l1_ball_projection(d, 0.0), torch.zeros_like(d))
    with pytest.raises(ValueError):
        l1_ball_projection(d, -1.0)


def test_l1_projection_matches_bisection():
    g = torch.Generator().manual_seed(1)
    for trial in range(20):
        n = int(torch.randint(1, 300, (1,), generator=g))
        d = torch.randn(3, n, generator=g, dtype=torch.float64) * float(torch.rand(1, generator=g)
                                                                       * 10)
        r = float(torch.rand(1, generator=g)) * float(d.abs().sum(1).max()) + 1e-3
        p = l1_ball_projection(d, r)
        for s in range(3):
            assert torch.allclose(p[s], _bisect_projection(d[s], r), atol=1e-9), (trial, s)
    # and it is the nearest point of the ball (vs random feasible points)
    d = torch.randn(1, 10, generator=g, dtype=torch.float64)
    p = l1_ball_projection(d, 1.0)
    q = torch.randn(5000, 10, generator=g, dtype=torch.float64)
    q = q / q.abs().sum(1, keepdim=True) * torch.rand(5000, 1, generator=g, dtype=torch.float64)
    assert float((d - p).norm()) <= float((d - q).norm(dim=1).min()) + 1e-12


# ------------------------------------------------------------------ one stage
def _stage_setup():
    G = _gen().requires_grad_(False)
    f = _target().requires_grad_(False)
    torch.manual_seed(3)
    w = G.mapping(torch.randn(2, 16), None)[:, :1]
    targets = torch.tensor([0, 1])
    tf = attack_transform(None, 16, [0.9, 1.0], [1.0, 1.0])
    return G, f, w, targets, tf


def test_stage_k_changes_mid_and_w_within_radii():
    G, f, w, targets, tf = _stage_setup()
    mid0, _ = G.synthesis.block_features(broadcast_w(G, w), 0)
    r_mid, r_w = 0.05, 0.02
    out = optimize_stage(G, f, w, mid0, 1, targets, steps=5, lr=0.05, betas=(0.1, 0.1),
                         transform=tf, loss_fn=poincare_loss, radius_mid=r_mid, radius_w=r_w)
    dm = (out["mid"] - mid0).reshape(2, -1).abs().sum(1)
    dw = (out["w"] - w).reshape(2, -1).abs().sum(1)
    assert bool((dm > 0).all()) and bool((dw > 0).all())
    assert bool((dm <= r_mid * (1 + 1e-4)).all()) and bool((dw <= r_w * (1 + 1e-4)).all())
    # the balls bind (unconstrained Adam moves ~lr per element per step)
    assert torch.allclose(dm, torch.full((2,), r_mid), rtol=1e-4)
    # output features = block 1's output from the optimised mid and w
    ref, _ = G.synthesis.block_features(broadcast_w(G, out["w"]), 1, start=1, x=out["mid"])
    assert torch.equal(out["out_features"], ref)
    assert out["out_features"].shape[1:] == G.synthesis.feature_shape(2)

    # radius 0 means no projection: free moves exceed the small radii used above
    free = optimize_stage(G, f, w, mid0, 1, targets, steps=5, lr=0.05, betas=(0.1, 0.1),
                          transform=tf, loss_fn=poincare_loss, radius_mid=0, radius_w=0)
    assert bool(((free["mid"] - mid0).reshape(2, -1).abs().sum(1) > r_mid * 10).all())
    assert bool(((free["w"] - w).reshape(2, -1).abs().sum(1) > r_w * 10).all())

    # block 0: the mid ball does not apply and there are no mid features
    s0 = optimize_stage(G, f, w, None, 0, targets, steps=3, lr=0.05, betas=(0.1, 0.1),
                        transform=tf, loss_fn=poincare_loss, radius_mid=1e-6, radius_w=r_w)
    assert s0["mid"] is None
    assert bool(((s0["w"] - w).reshape(2, -1).abs().sum(1) <= r_w * (1 + 1e-4)).all())


def test_recorded_image_is_from_before_the_update():
    G, f, w, targets, tf = _stage_setup()
    mid0, _ = G.synthesis.block_features(broadcast_w(G, w), 0)
    out = optimize_stage(G, f, w, mid0, 1, targets, steps=1, lr=0.05, betas=(0.1, 0.1),
                         transform=tf, loss_fn=poincare_loss)
    before = G.synthesis.forward_from(1, mid0, broadcast_w(G, w), noise_mode="const")
    after = G.synthesis.forward_from(1, out["mid"], broadcast_w(G, out["w"]), noise_mode="const")
    assert torch.equal(out["last_img"], before)
    assert not torch.allclose(after, before)
    # starting at block 1 drops block 0's toRGB contribution (docs/sources.md#if-gmi)
    full = G.synthesis(broadcast_w(G, w), noise_mode="const")
    assert not torch.allclose(before, full)
    x0, img0 = G.synthesis.block_features(broadcast_w(G, w), 0)
    assert torch.allclose(G.synthesis.forward_from(1, x0, broadcast_w(G, w), img=img0), full,
                          atol=1e-6)


# ------------------------------------------------------------------ whole attack
def test_best_stage_is_argmax_of_stage_acc1():
    favoured = 1
    n_stages = 3
    calls = []

    def scorer(images, targets):
        stage = len(calls) % n_stages  # batches score their stages in order 0..S-1
        calls.append(stage)
        s = image_scorer(images, targets)
        s["correct_top1"] = torch.full((len(targets),), 1.0 if stage == favoured else 0.25)
        return s

    logs = []
    out = run_ifgmi(_gen(), _target(), _params(), scorer, progress=False, log=logs.append)
    assert out["best_stage"] == favoured
    assert out["stage_attacc1"] == pytest.approx([0.25, 1.0, 0.25])
    assert out["selection_note"] == SELECTION_NOTE and "evaluation" in SELECTION_NOTE
    assert "best stage 1" in logs[-1]
    # first-k targets (IF-GMI parser): classes 0 and 1, 3 candidates each, batches 2+1
    assert out["targets"].tolist() == [0, 0, 0, 1, 1, 1]
    assert len(calls) == 4 * n_stages
    frame = out["frame"]
    assert list(frame.columns) == ["class", *SCORE_COLUMNS, "img_absmax"] and len(frame) == 6
    assert (frame["correct_top1"] == 1.0).all()
    assert out["final_w"].shape == (6, 1, 16)
    assert sorted(out["best_images"]) == [0, 1]
    assert out["best_images"][0]["image"].dtype == torch.uint8
    assert out["best_images"][0]["image"].shape == (3, 8, 8)


def test_too_many_stages_raises():
    with pytest.raises(ValueError, match="synthesis blocks"):
        run_ifgmi(_gen(), _target(), _params(steps=[1, 1, 1, 1]), image_scorer, progress=False,
                  log=lambda *_: None)


def test_poincare_loss_is_default():
    p = _params()
    del p["loss"], p["lr"], p["betas"]
    s = ifgmi_settings(p)
    assert s["loss"] == "poincare" and s["lr"] == 0.005 and s["betas"] == [0.1, 0.1]
    assert ifgmi_settings(_params(loss=None))["loss"] == "poincare"
    out = run_ifgmi(_gen(), _target(), {**p, "steps": [1, 1]}, image_scorer, progress=False,
                    log=lambda *_: None)
    assert "poincare loss" in out["note"]


class _Crash(RuntimeError):
    pass


def test_resume_equals_uninterrupted(tmp_path):
    params = _params()
    ref = run_ifgmi(_gen(), _target(), params, image_scorer, progress=False,
                    log=lambda *_: None)
    plain_dir = run_ifgmi(_gen(), _target(), params, image_scorer, progress=False,
                          resume_dir=tmp_path / "a", log=lambda *_: None)

    n = {"calls": 0}

    def crashing(images, targets):
        n["calls"] += 1
        if n["calls"] > 2 * 3:  # two batches of three stages finish, then the job dies
            raise _Crash
        return image_scorer(images, targets)

    with pytest.raises(_Crash):
        run_ifgmi(_gen(), _target(), params, crashing, progress=False,
                  resume_dir=tmp_path / "b", log=lambda *_: None)
    assert sorted(p.name for p in (tmp_path / "b").glob("batch*.pt")) == [
        "batch00000.pt", "batch00001.pt"]
    resumed = run_ifgmi(_gen(), _target(), params, image_scorer, progress=False,
                        resume_dir=tmp_path / "b", log=lambda *_: None)
    for other in (plain_dir, resumed):
        assert other["best_stage"] == ref["best_stage"]
        assert other["stage_attacc1"] == ref["stage_attacc1"]
        assert other["frame"].equals(ref["frame"])
        assert torch.equal(other["final_w"], ref["final_w"])
        assert torch.equal(other["targets"], ref["targets"])
        assert sorted(other["best_images"]) == sorted(ref["best_images"])
        for c, v in ref["best_images"].items():
            assert other["best_images"][c]["evalconf"] == v["evalconf"]
            assert torch.equal(other["best_images"][c]["image"], v["image"])
    # a resume directory refuses other parameters
    with pytest.raises(ValueError, match="other parameters"):
        run_ifgmi(_gen(), _target(), _params(lr=0.02), image_scorer, progress=False,
                  resume_dir=tmp_path / "b", log=lambda *_: None)


def test_run_radii_per_stage_and_zero_means_free(tmp_path):
    """Radii are indexed by stage and centred on each stage's start: with radius r_i the
    best stage's w lies within Σ r_i of the candidate-search w; radius 0 leaves w free."""
    tiny = [1e-3, 2e-3, 3e-3]
    out = run_ifgmi(_gen(), _target(), _params(max_radius_w=tiny, max_radius_mid=tiny),
                    image_scorer, progress=False, resume_dir=tmp_path / "r", log=lambda *_: None)
    w_init = torch.load(tmp_path / "r" / "init_w.pt", weights_only=True)
    bound = sum(tiny[:out["best_stage"] + 1]) * (1 + 1e-4)
    dev = (out["final_w"] - w_init).reshape(len(w_init), -1).abs().sum(1)
    assert bool((dev <= bound).all()) and bool((dev > 0).all())
    free = run_ifgmi(_gen(), _target(), _params(max_radius_w=[0, 0, 0], max_radius_mid=[0, 0, 0]),
                     image_scorer, progress=False, log=lambda *_: None)
    dev_free = (free["final_w"] - w_init).reshape(len(w_init), -1).abs().sum(1)
    assert bool((dev_free > 10 * sum(tiny)).all())
    with pytest.raises(ValueError, match="radius"):
        run_ifgmi(_gen(), _target(), _params(max_radius_w=[1, 1]), image_scorer,
                  progress=False, log=lambda *_: None)


def test_run_ifgmi_logs_one_progress_line_per_batch(caplog):
    with caplog.at_level("INFO", logger="atat.inversion.ifgmi"):
        run_ifgmi(_gen(), _target(), _params(steps=[1, 1]), image_scorer, progress=True,
                  log=lambda *_: None)
    lines = [r.getMessage() for r in caplog.records if r.name == "atat.inversion.ifgmi"
             and r.getMessage().startswith("IF-GMI batch groups")]
    # 2 classes x 3 candidates in batches of 2 within a class: batches of 2, 1, 2, 1, of
    # which no two consecutive ones fit in one batch of 2: 4 groups
    assert [line.split()[3] for line in lines] == ["1/4", "2/4", "3/4", "4/4"], lines


# ------------------------------------------------------------------ lockstep (issue 16)
def _lockstep_params(**kw):
    # 3 classes x 2 candidates, batch size 4: the per-class batches [2, 2, 2] run as the
    # groups [[0, 1], [2]]
    return _params(**{"candidates": {"num_candidates": 2, "search_space_size": 12,
                                     "batch_size": 6}, "batch_size": 4, "targets": 3, **kw})


def _assert_same_run(a, b, exact):
    close = (lambda x, y: torch.equal(x, y)) if exact else (
        lambda x, y: torch.allclose(x, y, rtol=1e-4, atol=1e-5))
    assert a["best_stage"] == b["best_stage"]
    assert torch.equal(a["targets"], b["targets"])
    assert close(a["final_w"], b["final_w"])
    assert list(a["frame"].columns) == list(b["frame"].columns)
    assert a["frame"]["class"].tolist() == b["frame"]["class"].tolist()
    for col in (*SCORE_COLUMNS, "img_absmax"):
        x = torch.tensor(a["frame"][col].to_numpy())
        y = torch.tensor(b["frame"][col].to_numpy())
        assert close(x, y) or (x.isnan().all() and y.isnan().all()), col
    assert a["stage_attacc1"] == pytest.approx(b["stage_attacc1"], abs=0 if exact else 1e-9)
    for sa, sb in zip(a["stage_summary"], b["stage_summary"]):
        assert sa == pytest.approx(sb, rel=0 if exact else 1e-4)
    assert sorted(a["best_images"]) == sorted(b["best_images"])


def test_lockstep_equals_one_batch_at_a_time(monkeypatch):
    """Consecutive per-class batches optimised as one batch give every batch the result it
    gets alone: same random crops (each batch's own stream), same per-batch loss and balls.
    Equal up to float rounding: the generator's modulated convolution is one grouped
    convolution over the batch, whose CPU kernel sums in a batch-size dependent order
    (~1e-6 in an image), so the images differ by rounding."""
    seen = []
    real = ifgmi.optimize_stage

    def spy(G, target_model, w, *a, **k):
        seen.append(len(w))
        return real(G, target_model, w, *a, **k)

    monkeypatch.setattr(ifgmi, "optimize_stage", spy)
    p = _lockstep_params()
    alone = run_ifgmi(_gen(), _target(), p, image_scorer, progress=False, log=lambda *_: None,
                      lockstep=False)
    assert seen == [2] * 9                     # 3 batches x 3 stages
    seen.clear()
    together = run_ifgmi(_gen(), _target(), p, image_scorer, progress=False,
                         log=lambda *_: None)
    assert seen == [4, 4, 4, 2, 2, 2]          # groups [[0, 1], [2]] x 3 stages
    _assert_same_run(alone, together, exact=False)
    # what a lane computes does not depend on which lanes share its batch
    seen.clear()
    single = run_ifgmi(_gen(), _target(), _lockstep_params(batch_size=2), image_scorer,
                       progress=False, log=lambda *_: None)
    assert seen == [2] * 9
    _assert_same_run(alone, single, exact=True)


class _NoisyTarget(nn.Module):
    """A target that samples at inference, as MID's bottleneck does."""

    def __init__(self):
        super().__init__()
        self.net = _target()

    def forward(self, x):
        logits = self.net(x)
        return logits + 0.1 * torch.randn_like(logits)


def test_no_lockstep_when_the_target_draws_random_numbers():
    logs = []
    p = _lockstep_params()
    together = run_ifgmi(_gen(), _NoisyTarget(), p, image_scorer, progress=False,
                         log=logs.append)
    assert any("draws random numbers" in m for m in logs)
    alone = run_ifgmi(_gen(), _NoisyTarget(), p, image_scorer, progress=False,
                      log=lambda *_: None, lockstep=False)
    _assert_same_run(alone, together, exact=True)


def test_lockstep_resume_recomputes_only_missing_batches(tmp_path):
    p = _lockstep_params()
    ref = run_ifgmi(_gen(), _target(), p, image_scorer, progress=False, log=lambda *_: None)
    rdir = tmp_path / "r"
    run_ifgmi(_gen(), _target(), p, image_scorer, progress=False, resume_dir=rdir,
              log=lambda *_: None)
    # the job was killed after writing batch 0 of the group [0, 1]: only batch 1 is redone
    (rdir / "batch00001.pt").unlink()
    calls = []

    def counting(images, targets):
        calls.append(len(targets))
        return image_scorer(images, targets)

    resumed = run_ifgmi(_gen(), _target(), p, counting, progress=False, resume_dir=rdir,
                        log=lambda *_: None)
    assert calls == [2, 2, 2]                  # batch 1 alone, 3 stages
    _assert_same_run(ref, resumed, exact=False)
