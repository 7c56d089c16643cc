"""PPA and the attack building blocks shared with IF-GMI/PPDG (docs/sources.md#attack-conventions,
#ppa, #identity-losses)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from atat.inversion import core, ppa
from atat.inversion.stylegan2 import Generator


def tiny_generator(seed: int = 0) -> Generator:
    torch.manual_seed(seed)
    return Generator(z_dim=16, w_dim=16, img_resolution=16, mapping_kwargs=dict(num_layers=1),
                     synthesis_kwargs=dict(channel_base=128, channel_max=16)).eval()


class TinyTarget(nn.Module):
    def __init__(self, n_classes: int = 4, seed: int = 1):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, n_classes))

    def forward(self, x):
        return self.net(x)


def fake_scorer(images, targets):
    n = len(targets)
    conf = images.mean(dim=(1, 2, 3)).sigmoid()
    return {"correct_top1": (conf > 0.5).float(), "correct_top5": torch.ones(n),
            "evalconf": conf, "dist_face": torch.full((n,), float("nan")),
            "dist_eval": torch.arange(n, dtype=torch.float32)}


def params(**kw):
    p = dict(candidates=dict(num_candidates=4, search_space_size=24, batch_size=8,
                             horizontal_flip=True, truncation_psi=0.5, truncation_cutoff=8),
             batch_size=4, steps=3, lr=0.005, betas=[0.1, 0.1], lr_milestones=[2],
             lr_gamma=0.1, loss="poincare", rrc_scale=[0.9, 1.0], rrc_ratio=[1.0, 1.0],
             final_selection=dict(samples_per_target=2, iterations=3, rrc_scale=[0.5, 0.9],
                                  rrc_ratio=[0.8, 1.2], flip=0.5),
             targets=[1, 3], seed=42, figure_resolution=8, center_crop=None,
             dataset_kind="synthfaces", n_classes=4, input_resolution=16)
    p.update(kw)
    return p


def test_poincare_loss_hand_value():
    # docs/sources.md#identity-losses: K=2, logits (2, -1), y = 0 -> loss ~ 9.210. (delta by the
    # formula is 4998.75; a rounded 4997.7 gives the same 9.210.)
    u0, u1 = 2 / 3, -1 / 3                       # float64 by hand
    delta = 2 * ((u0 - 0.9999) ** 2 + u1 ** 2) / ((1 - 5 / 9) * (1 - 0.9999 ** 2))
    assert delta == pytest.approx(4998.75, abs=0.01)
    loss = core.poincare_loss(torch.tensor([[2.0, -1.0]], dtype=torch.float64), torch.tensor([0]))
    assert float(loss) == pytest.approx(math.acosh(1 + delta), rel=1e-9)
    assert float(loss) == pytest.approx(9.210, abs=1e-3)


def test_target_classes_match_spec_lists():
    fs = sorted(core.target_classes(75, 530, "facescrub", seed=42))
    assert fs[:5] == [1, 6, 7, 12, 16] and fs[-3:] == [501, 516, 522]
    assert sum(c < 265 for c in fs) == 37 and sum(c >= 265 for c in fs) == 38
    ca = core.target_classes(75, 1000, "celeba", seed=42)
    assert ca[:6] == [654, 114, 25, 759, 281, 250] and ca[-1] == 591
    assert core.target_classes(3, 10, "celeba", first_k=True) == [0, 1, 2]
    assert core.target_classes("all", 3, "x") == [0, 1, 2]


def test_candidate_search_returns_top_k_rows():
    G, T = tiny_generator(), TinyTarget().eval()
    ws = core.candidate_search(G, T, [2, 2, 2], search_space_size=20, center_crop=None,
                               resize=16, batch_size=7, seed=5)
    # independent recomputation of the flip-averaged confidences
    import numpy as np
    z = torch.from_numpy(np.random.RandomState(5).randn(20, 16)).float()
    with torch.no_grad():
        w_all = G.mapping(z, None, truncation_psi=0.5, truncation_cutoff=8)
        img = G.synthesis(w_all, noise_mode="const").clamp(-1, 1)
        conf = (T(img).softmax(1) + T(img.flip(3)).softmax(1)) / 2
    top = torch.argsort(conf[:, 2], descending=True)[:3]
    assert torch.allclose(ws, w_all[top])


def test_batched_transform_draws_one_parameter_set_per_call():
    tf = core.attack_transform(None, 16, (0.3, 0.5), (0.8, 1.2))
    x = torch.randn(1, 3, 16, 16).repeat(6, 1, 1, 1)
    torch.manual_seed(0)
    out = tf(x)
    assert all(torch.equal(out[0], out[i]) for i in range(1, 6))
    torch.manual_seed(1)
    singles = torch.cat([tf(x[:1]) for _ in range(6)])   # six calls: six draws
    assert not all(torch.equal(singles[0], singles[i]) for i in range(1, 6))


def test_final_selection_keeps_best_in_descending_order():
    G, T = tiny_generator(), TinyTarget().eval()
    w = torch.randn(6, 1, 16)
    targets = torch.tensor([0, 0, 0, 1, 1, 1])
    torch.manual_seed(0)
    sel_w, sel_t, scores = core.final_selection(G, T, w, targets, samples_per_target=2,
                                                iterations=4, center_crop=None, resize=16)
    assert sel_t.tolist() == [0, 0, 1, 1]
    assert scores[0] >= scores[1] and scores[2] >= scores[3]
    # the kept ones are the best of their class under the same random draws
    torch.manual_seed(0)
    _, _, all_scores = core.final_selection(G, T, w, targets, samples_per_target=3,
                                            iterations=4, center_crop=None, resize=16)
    assert torch.allclose(scores[:2], all_scores[:2]) and torch.allclose(scores[2:], all_scores[3:5])


def test_final_selection_renders_in_small_batches_with_the_same_result():
    """Scoring batches of 250 must not render 250 full-resolution images at once."""
    G, T = tiny_generator(), TinyTarget().eval()
    sizes = []
    synthesis = G.synthesis.forward

    def counting(ws, *args, **kwargs):
        sizes.append(len(ws))
        return synthesis(ws, *args, **kwargs)

    w = torch.randn(7, 1, 16)
    targets = torch.tensor([0] * 7)
    torch.manual_seed(0)
    ref = core.final_selection(G, T, w, targets, samples_per_target=3, iterations=2,
                               center_crop=None, resize=16, batch_size=7, render_batch_size=7)
    G.synthesis.forward = counting
    torch.manual_seed(0)
    out = core.final_selection(G, T, w, targets, samples_per_target=3, iterations=2,
                               center_crop=None, resize=16, batch_size=7, render_batch_size=3)
    assert sizes == [3, 3, 1]
    for a, b in zip(ref, out):
        torch.testing.assert_close(a, b)
    assert core.RENDER_BATCH_SIZE == 20  # official PPA create_image default


def test_optimize_w_raises_target_confidence():
    G, T = tiny_generator(), TinyTarget().eval().requires_grad_(False)
    w0 = G.mapping(torch.randn(4, 16), None)[:, :1]
    targets = torch.tensor([0, 1, 2, 3])
    tf = core.attack_transform(None, 16, (1.0, 1.0), (1.0, 1.0))

    def conf(w):
        with torch.no_grad():
            return T(core.render(G, w)).softmax(1).gather(1, targets[:, None]).mean()

    w1, last = core.optimize_w(G, T, w0, targets, steps=30, lr=0.05, betas=(0.1, 0.1),
                               transform=tf, loss_fn=core.poincare_loss)
    assert conf(w1) > conf(w0)
    assert last.shape == (4,)


def test_run_ppa_outputs_and_resume_equivalence(tmp_path, monkeypatch):
    G, T = tiny_generator(), TinyTarget()
    full = ppa.run_ppa(G, T, params(), fake_scorer, progress=False)
    assert full["targets"].tolist() == [1, 1, 3, 3]
    assert list(full["frame"].columns) == ["class", *core.SCORE_COLUMNS, *core.IMAGE_COLUMNS]
    assert len(full["frame"]) == 4 and sorted(full["best_images"]) == [1, 3]
    img = full["best_images"][1]["image"]
    assert img.dtype == torch.uint8 and img.shape == (3, 8, 8)

    # interrupted after the first of two batches, then resumed
    calls = {"n": 0}
    real = core.optimize_w

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated kill")
        return real(*a, **k)

    monkeypatch.setattr(ppa, "optimize_w", flaky)
    with pytest.raises(KeyboardInterrupt):
        ppa.run_ppa(G, T, params(), fake_scorer, resume_dir=tmp_path, progress=False)
    assert (tmp_path / "batch00000.pt").exists() and not (tmp_path / "batch00001.pt").exists()
    monkeypatch.setattr(ppa, "optimize_w", real)
    resumed = ppa.run_ppa(G, T, params(), fake_scorer, resume_dir=tmp_path, progress=False)
    assert torch.equal(resumed["final_w"], full["final_w"])
    assert resumed["frame"].equals(full["frame"])


def test_unknown_loss_is_refused():
    with pytest.raises(ValueError, match="unknown inversion loss"):
        core.identity_loss("hinge")


def test_run_ppa_logs_one_progress_line_per_batch(caplog):
    with caplog.at_level("INFO", logger="atat.inversion.ppa"):
        ppa.run_ppa(tiny_generator(), TinyTarget(), params(batch_size=2), fake_scorer,
                    progress=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "atat.inversion.ppa"
             and r.getMessage().startswith("PPA batches")]
    # 2 classes x 4 candidates in batches of 2
    assert [line.split()[2] for line in lines] == ["1/4", "2/4", "3/4", "4/4"], lines


def test_initial_latents_are_the_candidate_search_and_reused_from_the_init_file(tmp_path):
    G, T = tiny_generator(), TinyTarget()
    cand = params()["candidates"]
    per_cand = torch.tensor([1, 1, 3])
    ws = core.candidate_search(G, T, [1, 1, 3], search_space_size=24, center_crop=None,
                               resize=16, horizontal_flip=True, batch_size=8,
                               truncation_psi=0.5, truncation_cutoff=8, seed=7)
    path = tmp_path / "init_w.pt"
    w = core.initial_latents(G, T, per_cand, cand, center_crop=None, resize=16, seed=7,
                             init_path=path)
    assert w.shape == (3, 1, 16) and torch.equal(w, ws[:, :1]) and path.exists()
    # a later attempt reads the file instead of searching (another seed would pick others)
    again = core.initial_latents(G, T, per_cand, cand, center_crop=None, resize=16, seed=8,
                                 init_path=path)
    assert torch.equal(again, w)
    fresh = core.initial_latents(G, T, per_cand, cand, center_crop=None, resize=16, seed=8)
    assert not torch.equal(fresh, w)


# ------------------------------------------------------------------ lockstep lanes (issue 16)
def test_pack_lanes_keeps_order_and_capacity():
    assert core.pack_lanes([5, 5, 5, 5, 5], 20) == [[0, 1, 2, 3], [4]]
    assert core.pack_lanes([20, 20, 10, 20, 20, 10], 20) == [[0], [1], [2], [3], [4], [5]]
    assert core.pack_lanes([2, 1, 2, 1], 3) == [[0, 1], [2, 3]]
    assert core.pack_lanes([30, 1], 20) == [[0], [1]]   # an oversized entry stands alone
    assert core.pack_lanes([], 4) == []


def test_draws_random_detects_sampling_and_restores_the_stream():
    net = TinyTarget()
    x = torch.zeros(2, 3, 8, 8)
    torch.manual_seed(3)
    assert not core.draws_random(net, x)
    assert core.draws_random(lambda t: net(t) + torch.randn(1), x)
    assert core.draws_random(lambda t: torch.rand(1), x)
    after = torch.rand(1)
    torch.manual_seed(3)
    assert torch.equal(after, torch.rand(1))            # the probes left the stream as it was


def test_lanes_give_each_batch_its_own_stream_and_loss():
    """Each lane's transform draws from its own stream exactly as its batch does alone, and
    the summed loss gives each sample the gradient of its own batch's loss."""
    tf = core.attack_transform(None, 12, [0.5, 1.0], [0.75, 1.33])
    imgs = torch.randn(5, 3, 16, 16)
    sizes, seeds = [2, 3], [7, 11]
    alone = []
    for (a, b), s in zip(((0, 2), (2, 5)), seeds):
        torch.manual_seed(s)
        alone.append(torch.cat([tf(imgs[a:b]) for _ in range(3)]))  # 3 steps
    states = []
    for s in seeds:
        torch.manual_seed(s)
        states.append(torch.get_rng_state())
    lanes = core.Lanes(sizes, states)
    torch.manual_seed(99)
    outer = torch.get_rng_state()
    steps = [lanes.transform(tf)(imgs) for _ in range(3)]
    assert torch.equal(torch.get_rng_state(), outer)   # the global stream is untouched
    for j in range(2):
        assert torch.equal(torch.cat([lanes.split(o)[j] for o in steps]), alone[j])
    # the lane streams continue where the batches alone would be
    torch.manual_seed(seeds[1])
    for _ in range(3):
        tf(imgs[2:5])
    assert torch.equal(lanes.states[1], torch.get_rng_state())
    # loss: sum of the per-lane means
    logits = torch.randn(5, 4, requires_grad=True)
    targets = torch.tensor([0, 1, 2, 3, 0])
    (g,) = torch.autograd.grad(lanes.loss(core.poincare_loss)(logits, targets), logits)
    (g1,) = torch.autograd.grad(core.poincare_loss(logits[:2], targets[:2]), logits)
    (g2,) = torch.autograd.grad(core.poincare_loss(logits[2:], targets[2:]), logits)
    assert torch.allclose(g, g1 + g2, rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="random states"):
        core.Lanes([1, 2], states[:1])


def test_candidate_search_is_confidences_then_selection():
    G, T = tiny_generator(), TinyTarget()
    kw = dict(search_space_size=10, center_crop=None, resize=16, batch_size=4, seed=5)
    per = [1, 1, 3, 1]
    ws = core.candidate_search(G, T, per, **kw)
    w_all, conf = core.candidate_confidences(G, T, **kw)
    c0 = conf.clone()
    assert torch.equal(core.select_candidates(w_all, conf, per), ws)
    assert torch.equal(conf, c0)                        # selection leaves conf alone
    # per class from one search = all classes at once (the classes' columns are disjoint)
    both = torch.cat([core.select_candidates(w_all, conf, [c] * 2) for c in (0, 2)])
    assert torch.equal(both, core.select_candidates(w_all, conf, [0, 0, 2, 2]))
    top = conf[:, 1].argsort(descending=True)[:3]
    assert torch.equal(core.select_candidates(w_all, conf, [1, 1, 1]), w_all[top])
