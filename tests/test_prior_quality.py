"""The inversion prior's quality (issue 17 item 5): improved precision/recall and coverage on
fabricated embeddings, the recognition rate on a fake classifier, and the whole measurement with an
instrument whose answer is known: a prior that replays real faces reaches the target, an
untrained generator does not (and the preconditions table flags it)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from atat.analysis import preconditions as pc
from atat.plan.config import load_config
from atat.inversion import prior_quality as pq
from atat.inversion.stylegan2 import Generator

ROOT = Path(__file__).resolve().parents[1]
CONFIG = load_config(ROOT / "config" / "config.yaml")


# --------------------------------------------------------------------------- precision / recall
def test_identical_sets_have_precision_and_recall_one():
    x = torch.randn(50, 16, generator=torch.Generator().manual_seed(0))
    assert pq.precision_recall(x, x.clone(), k=3) == (1.0, 1.0)


def test_disjoint_far_sets_have_precision_and_recall_zero():
    gen = torch.Generator().manual_seed(1)
    real, fake = torch.randn(40, 8, generator=gen), torch.randn(40, 8, generator=gen) + 100.0
    assert pq.precision_recall(real, fake, k=3) == (0.0, 0.0)


def test_a_collapsed_fake_set_is_precise_but_has_low_recall():
    gen = torch.Generator().manual_seed(2)
    centres = torch.randn(10, 8, generator=gen) * 10          # ten well separated modes
    real = (centres[:, None] + torch.randn(10, 20, 8, generator=gen) * 0.1).reshape(200, 8)
    fake = centres[0] + torch.randn(200, 8, generator=gen) * 0.1   # one mode only
    precision, recall = pq.precision_recall(real, fake, k=3)
    assert precision > 0.7 and 0.05 < recall <= 0.1    # at most the one mode's 20 of 200


def test_coverage_of_identical_and_disjoint_sets():
    x = torch.randn(50, 16, generator=torch.Generator().manual_seed(0))
    assert pq.ball_coverage(x, x.clone(), k=3) == 1.0
    assert pq.ball_coverage(x, x + 100.0, k=3) == 0.0


def test_a_diffuse_set_has_high_recall_but_low_coverage():
    """Why coverage, not recall, is the target: recall's balls are the samples' own."""
    gen = torch.Generator().manual_seed(3)
    real = torch.randn(200, 8, generator=gen) * 0.1            # one tight real cluster
    diffuse = torch.randn(20, 8, generator=gen) * 3.0          # a few scattered samples
    _, recall = pq.precision_recall(real, diffuse, k=3)
    assert recall == 1.0                                       # huge balls swallow the reals
    assert pq.ball_coverage(real, diffuse, k=3) <= 0.05        # almost no real ball is hit


def test_kth_neighbour_radius_excludes_the_point_itself_and_needs_enough_points():
    x = torch.tensor([[0.0], [1.0], [3.0], [6.0]])
    assert pq.kth_neighbour_radii(x, 1).tolist() == [1.0, 1.0, 2.0, 3.0]
    assert pq.kth_neighbour_radii(x, 3).tolist() == [6.0, 5.0, 3.0, 6.0]
    with pytest.raises(ValueError, match="more than k"):
        pq.kth_neighbour_radii(x, 4)


# --------------------------------------------------------------------------- recognition
class _FixedLogits(nn.Module):
    """A fake classifier: image i -> logits row i of a fixed table (image = its index)."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.register_buffer("logits", logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits[x[:, 0].long()]


def test_recognition_rate_counts_confident_images_on_a_fake_classifier():
    # softmax maxima 0.9, 0.5, 1/3 (uniform over three classes), 0.7
    probs = torch.tensor([[0.9, 0.05, 0.05], [0.5, 0.25, 0.25], [1 / 3] * 3, [0.1, 0.7, 0.2]])
    clf = _FixedLogits(probs.log())
    conf, pred = pq.classify(clf, torch.arange(4.0)[:, None], batch_size=3)
    assert conf.tolist() == pytest.approx([0.9, 0.5, 1 / 3, 0.7])
    assert pred.tolist() == [0, 0, 0, 1]
    assert pq.recognition_rate(conf, 0.5) == 0.75      # 0.5 itself counts
    assert pq.recognition_rate(conf, 0.8) == 0.25
    assert pq.recognition_rate(conf, 0.95) == 0.0


# --------------------------------------------------------------------------- the measurement
K, PER, RES = 6, 12, 8  # identities, images per identity, pixels


def _population(seed: int = 0):
    """Real 'faces': per identity a smooth random prototype plus small noise, in [-1, 1]."""
    gen = torch.Generator().manual_seed(seed)
    protos = torch.nn.functional.interpolate(torch.rand(K, 3, 2, 2, generator=gen) * 1.6 - 0.8,
                                             size=(RES, RES), mode="bilinear")
    protos = protos - protos.mean(dim=(1, 2, 3), keepdim=True)   # distinct, zero-mean patterns
    labels = torch.arange(K).repeat_interleave(PER)
    real = (protos[labels] + 0.05 * torch.randn(K * PER, 3, RES, RES, generator=gen)).clamp(-1, 1)
    held = [i for i in range(K * PER) if i % PER < 2]     # two per identity held out
    return protos, real, held


class _CosineClassifier(nn.Module):
    """A known instrument: logits = scale * cos(image, identity prototype)."""

    def __init__(self, protos: torch.Tensor, scale: float = 10.0):
        super().__init__()
        self.register_buffer("protos", nn.functional.normalize(protos.flatten(1), dim=1))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * nn.functional.normalize(x.flatten(1), dim=1) @ self.protos.T


def _embed(x: torch.Tensor) -> torch.Tensor:
    return nn.functional.normalize(x.flatten(1), dim=1)


class _ReplayPrior(nn.Module):
    """A 'generator' that returns real images (latent -> image index): a perfect prior."""

    def __init__(self, images: torch.Tensor):
        super().__init__()
        self.register_buffer("images", images)
        self.z_dim, self.num_ws = 4, 1
        self.anchor = nn.Parameter(torch.zeros(1))   # gives the module a device
        self.mapping = lambda z, c, truncation_psi=1.0: z[:, None]
        self.synthesis = self._synthesis

    def _synthesis(self, ws, noise_mode="const", force_fp32=True):
        idx = (ws[:, 0, 0].abs() * 1e4).long() % len(self.images)
        return self.images[idx]


def _untrained_generator() -> Generator:
    return _untrained_generator_at(RES)


def _measure(G):
    protos, real, held = _population()
    return pq.measure(G, _CosineClassifier(protos), _embed, real, held, samples=300, k=3,
                      confidence=0.5, seed=0)


def test_the_instrument_separates_real_faces_from_the_structure_free_floor():
    q = _measure(_untrained_generator())
    for stat in pq.STATISTICS:
        assert q[stat]["ceiling"] > q[stat]["floor"], (stat, q[stat])
    assert q["recognition"]["ceiling"] == 1.0 and q["precision"]["ceiling"] >= 0.5
    assert q["n_reference"] == K * (PER - 2) and q["n_heldout"] == 2 * K == q["n_recall"]
    assert q["identities_recognised"]["ceiling"] == K and q["n_identities"] == K


def test_a_replay_prior_reaches_the_target_and_an_untrained_generator_does_not(caplog):
    _, real, _ = _population()
    good, bad = _measure(_ReplayPrior(real)), _measure(_untrained_generator())
    for stat in pq.STATISTICS:
        assert good[stat]["normalised"] >= 0.9, (stat, good[stat])
        assert bad[stat]["normalised"] < 0.5, (stat, bad[stat])
    assert good["identities_recognised"]["prior"] == K
    # ... and the preconditions table says so, with one WARNING per failed statistic
    record = {"good": json.loads(json.dumps(pq._finite(good))),
              "bad": json.loads(json.dumps(pq._finite(bad)))}
    with caplog.at_level(logging.WARNING, logger="atat.analysis.preconditions"):
        df = pc.check_preconditions(_empty_summary(), {}, CONFIG, record)
        assert pc.warn_failed(df) == 3
    assert set(df["experiment"]) == {pc.PRIOR}
    passed = {(r["model"], r["check"]): bool(r["passed"]) for _, r in df.iterrows()}
    assert passed == {**{("generators/good", f"prior_{s}"): True for s in pq.STATISTICS},
                      **{("generators/bad", f"prior_{s}"): False for s in pq.STATISTICS}}
    assert all("generators/bad" in r.getMessage() and "generators.bad.train: steps"
               in r.getMessage() for r in caplog.records)


def test_the_samples_are_seeded():
    G = _untrained_generator()
    a = pq.generator_samples(G, 5, seed=3, resolution=RES)
    assert torch.equal(a, pq.generator_samples(G, 5, seed=3, resolution=RES))
    assert not torch.equal(a, pq.generator_samples(G, 5, seed=4, resolution=RES))
    assert a.shape == (5, 3, RES, RES) and a.abs().max() <= 1


def test_the_floor_has_the_real_pixels_mean_and_spread():
    _, real, _ = _population()
    floor = pq.gaussian_floor(real, 4000, seed=0)
    assert floor.mean(0).sub(real.mean(0)).abs().max() < 0.05
    assert floor.std(0).sub(real.std(0)).abs().mean() < 0.05


def test_too_few_held_out_images_for_recall_give_nan_and_a_note():
    protos, real, _ = _population()
    q = pq.measure(_untrained_generator(), _CosineClassifier(protos), _embed, real, [0, 1],
                   samples=50, k=3, confidence=0.5, seed=0)
    assert all(math.isnan(q["recall"][s]) for s in ("prior", "ceiling", "floor", "normalised"))
    assert "need more than k = 3" in q["notes"][0]


def test_settings_name_the_missing_key():
    from atat.plan.config import ConfigError

    with pytest.raises(ConfigError, match="prior_quality"):
        pq.settings({"preconditions": {}})
    with pytest.raises(ConfigError, match="confidence"):
        pq.settings({"preconditions": {"prior_quality": {"samples": 5, "k": 3, "seed": 0}}})


# --------------------------------------------------------------------------- several classifiers
def _member(seed: int, rec: float, prec: float, cov: float) -> dict:
    """A classifier's quality record with the given normalised values (prior = normalised,
    ceiling 1, floor 0)."""
    stats = {"recognition": rec, "precision": prec, "coverage": cov, "recall": 0.5}
    rec_ = {st: {"prior": v, "ceiling": 1.0, "floor": 0.0, "normalised": v}
            for st, v in stats.items()}
    return {**rec_, "identities_recognised": {"prior": 10 + seed, "ceiling": 20, "floor": seed},
            "notes": [f"note {seed}"] if seed == 1 else [], "n_samples": 50, "n_recall": 8,
            "n_reference": 40, "n_heldout": 8, "n_identities": 20, "k": 3, "confidence": 0.5,
            "seed": 0, "classifier_seed": seed}


def test_several_classifiers_are_combined_by_their_median():
    members = [_member(0, 0.48, 0.90, 0.52), _member(1, 0.42, -0.71, 0.60),
               _member(2, 0.70, 0.63, 0.74), _member(3, 0.10, 0.36, 0.53),
               _member(4, 0.55, math.nan, 0.61)]
    q = pq.combine(members)
    assert q["recognition"]["normalised"] == pytest.approx(0.48)
    assert q["recognition"]["prior"] == pytest.approx(0.48) and q["recognition"]["ceiling"] == 1
    # a NaN member (a classifier that does not tell real faces from the floor) is left out
    # of the median while more than half the members are finite
    assert q["precision"]["normalised"] == pytest.approx((0.36 + 0.63) / 2)
    assert q["coverage"]["normalised"] == pytest.approx(0.60)
    assert q["recognition"]["members"] == [0.48, 0.42, 0.70, 0.10, 0.55]
    assert q["classifiers"] == 5 and [r["classifier_seed"] for r in q["classifier_records"]] \
        == [0, 1, 2, 3, 4]
    assert q["identities_recognised"] == {"prior": 12, "ceiling": 20, "floor": 2}
    assert q["notes"] == ["classifier 1: note 1"] and q["n_samples"] == 50
    # ... and one outlying classifier no longer decides the verdict, which it did alone
    rows = {r["check"]: r for r in pc.prior_rows({"g": json.loads(json.dumps(pq._finite(q)))},
                                                 CONFIG)}
    assert not bool(rows["prior_recognition"]["passed"])      # 0.48: 0.70 alone would pass
    assert not bool(rows["prior_precision"]["passed"])        # 0.495: 0.90 alone would pass
    assert bool(rows["prior_coverage"]["passed"])
    assert rows["prior_recognition"]["note"].startswith(
        "median of 5 public classifiers (seeds 0, 1, 2, 3, 4; normalised each 0.48 / 0.42 / "
        "0.70 / 0.10 / 0.55): prior 0.480")
    alone = pc.prior_rows({"g": members[2]}, CONFIG)
    assert bool(alone[0]["passed"]) and alone[0]["note"].startswith("prior 0.700")


def test_a_median_needs_more_than_half_of_the_classifiers_finite():
    members = [_member(0, math.nan, 0.9, 0.5), _member(1, math.nan, 0.8, 0.5),
               _member(2, 0.7, 0.7, 0.5), _member(3, 0.6, 0.6, 0.5)]
    q = pq.combine(members)
    assert math.isnan(q["recognition"]["normalised"])        # 2 of 4 finite: no verdict
    assert q["precision"]["normalised"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="no classifier records"):
        pq.combine([])


# --------------------------------------------------------------------------- files
def test_the_rule_path_from_files_writes_a_strict_json_record(tmp_path):
    """A synthfaces public pool, a 1-epoch public classifier and an untrained generator pickle
    -> quality.json (strict JSON, NaN -> null) -> the preconditions rows."""
    from atat.data.synthfaces import generate_synthfaces
    from atat.inversion.evaluation import train_face_embedding
    from atat.inversion.safe_pickle import save_stylegan_pickle

    generate_synthfaces(tmp_path / "ds", n_private_identities=2, n_public_identities=3,
                        images_per_identity=4, public_images_per_identity=8, resolution=32,
                        seed=3, progress=False)
    train_face_embedding(tmp_path / "ds", out_model=tmp_path / "face.pt",
                         out_metrics=tmp_path / "face.json", resolution=32,
                         training={"epochs": 1, "batch_size": 8, "lr_milestones": []},
                         progress=False)
    save_stylegan_pickle(tmp_path / "g.pkl", _untrained_generator_at(32))
    record = pq.prior_quality(tmp_path / "g.pkl", tmp_path / "face.pt", tmp_path / "face.json",
                              tmp_path / "ds", tmp_path / "g.quality.json",
                              config_settings={**pq.settings(CONFIG), "samples": 64})
    back = json.loads((tmp_path / "g.quality.json").read_text())
    assert back["n_samples"] == 64 and back["n_identities"] == 3
    assert back["n_heldout"] == 3 and back["n_reference"] == 21   # 1 of 8 per identity held out
    assert back["recall"]["prior"] is None and record["generator_resolution"] == 32
    rows = {r["check"]: r for r in pc.prior_rows({"g": back}, CONFIG)}
    assert list(rows) == [f"prior_{s}" for s in pq.STATISTICS]
    assert "improved recall (reported only) prior nan" in rows["prior_coverage"]["note"]
    for stat in pq.STATISTICS:
        value = back[stat]["normalised"]
        assert rows[f"prior_{stat}"]["value"] == pytest.approx(value if value is not None
                                                               else math.nan, nan_ok=True)

    # the instrument of several classifiers: a second one trained with another seed
    train_face_embedding(tmp_path / "ds", out_model=tmp_path / "face1.pt",
                         out_metrics=tmp_path / "face1.json", resolution=32, seed=1,
                         training={"epochs": 1, "batch_size": 8, "lr_milestones": []},
                         progress=False)
    both = pq.prior_quality(tmp_path / "g.pkl", [tmp_path / "face.pt", tmp_path / "face1.pt"],
                            [tmp_path / "face.json", tmp_path / "face1.json"], tmp_path / "ds",
                            tmp_path / "g2.quality.json",
                            config_settings={**pq.settings(CONFIG), "samples": 64})
    assert both["classifiers"] == 2 and both["face_model"] == [str(tmp_path / "face.pt"),
                                                                str(tmp_path / "face1.pt")]
    assert [r["classifier_seed"] for r in both["classifier_records"]] == [0, 1]
    first = both["classifier_records"][0]   # the first classifier measures as it does alone
    for stat in pq.STATISTICS:
        assert first[stat] == pytest.approx(record[stat], nan_ok=True)
        pair = [r[stat]["normalised"] for r in both["classifier_records"]]
        assert both[stat]["members"] == pytest.approx(pair, nan_ok=True)
    back2 = json.loads((tmp_path / "g2.quality.json").read_text())
    assert "median of 2 public classifiers (seeds 0, 1;" in pc.prior_rows(
        {"g": back2}, CONFIG)[0]["note"]
    with pytest.raises(ValueError, match="one metrics.json per classifier"):
        pq.prior_quality(tmp_path / "g.pkl", [tmp_path / "face.pt", tmp_path / "face1.pt"],
                         [tmp_path / "face.json"], tmp_path / "ds", tmp_path / "g3.json",
                         config_settings=pq.settings(CONFIG))


def _untrained_generator_at(resolution: int) -> Generator:
    torch.manual_seed(0)
    return Generator(z_dim=8, w_dim=8, img_resolution=resolution,
                     mapping_kwargs=dict(num_layers=1),
                     synthesis_kwargs=dict(channel_base=64, channel_max=8, conv_clamp=256)).eval()


def _empty_summary():
    import pandas as pd

    return pd.DataFrame(columns=["dataset", "architecture", "defense", "seed", "test_acc"])
