"""Attack metrics (docs/sources.md#attack-accuracy-and-confidence, #facenet-distance,
#evaluation-model-distance): top-1/top-5/confidence on hand-set logits, squared distances to the
#nearest training image of the target class, NaN δ_face without a face net."""

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from atat.inversion.core import SCORE_COLUMNS, ResultAccumulator
from atat.inversion.metrics import (
    DEFAULT_FACE_NOTE,
    IMAGE_RANGE_WARN,
    Evaluator,
    min_sq_dist,
    summarize,
)

# An image is a constant colour -1 + 0.2 k encoding the code k; the fake networks look the
# code up in hand-set tables, so every feature and logit below is known exactly.
N_CLASSES = 7
FEATS = torch.zeros(10, 2)
FEATS[0] = torch.tensor([0.0, 0.0])   # attack image, target 0
FEATS[1] = torch.tensor([2.0, 2.0])   # attack image, target 1
FEATS[4] = torch.tensor([1.0, 0.0])   # real, class 0: d²(attack 0) = 1
FEATS[5] = torch.tensor([0.0, 3.0])   # real, class 0: d²(attack 0) = 9
FEATS[6] = torch.tensor([0.0, 0.5])   # real, class 1: nearer to attack 0, but the wrong class
FEATS[7] = torch.tensor([-1.0, 0.0])  # extra feature row for the accuracy test
LOGITS = torch.zeros(10, N_CLASSES)
LOGITS[:] = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0])
LOGITS[7] = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 10.0])


def images(codes, size=16):
    v = torch.tensor([-1 + 0.2 * k for k in codes]).view(-1, 1, 1, 1)
    return v.expand(-1, 3, size, size).clone()


def code_of(x):
    return ((x.mean(dim=(1, 2, 3)) + 1) / 0.2).round().long()


class FakeEval(nn.Module):
    resolution = 8

    def __init__(self, feats=FEATS, logits=LOGITS):
        super().__init__()
        self.feats, self.logits = feats, logits
        self.seen_sizes = []

    def features(self, x):
        self.seen_sizes.append(tuple(x.shape[-2:]))
        return self.feats[code_of(x)]

    def head(self, f):
        k = torch.cdist(f, self.feats).argmin(dim=1)
        return self.logits[k]


class FakeFace(nn.Module):
    """Random unit-norm embedding of the flattened image (resolution 6)."""

    resolution = 6

    def __init__(self, dim=4):
        super().__init__()
        self.lin = nn.Linear(3 * 6 * 6, dim)

    def forward(self, x):
        assert x.shape[-1] == 6
        return F.normalize(self.lin(x.flatten(1)), dim=1)


def test_top1_top5_and_confidence_from_known_logits():
    real = (images([4, 5, 6, 6]), torch.tensor([0, 4, 5, 6]))
    model = FakeEval()
    ev = Evaluator(model, None, real=real, center_crop=12, eval_resolution=8)
    x = images([0, 0, 0, 7])
    t = torch.tensor([0, 4, 5, 6])
    s = ev(x, t)
    assert set(s) == set(SCORE_COLUMNS)
    assert s["correct_top1"].tolist() == [1.0, 0.0, 0.0, 1.0]
    assert s["correct_top5"].tolist() == [1.0, 1.0, 0.0, 1.0]  # target 4 is 5th, 5 is 6th
    z = sum(math.exp(v) for v in [5, 4, 3, 2, 1, 0, -1])
    expected = [math.exp(5) / z, math.exp(1) / z, math.exp(0) / z,
                math.exp(10) / (6 + math.exp(10))]
    assert s["evalconf"].tolist() == pytest.approx(expected, rel=1e-5)
    assert all(v.dtype == torch.float32 and v.shape == (4,) for v in s.values())
    # crop 16 -> 12, then resize to the eval resolution
    assert model.seen_sizes[-1] == (8, 8)


def test_top5_uses_all_classes_when_fewer_than_five():
    feats = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    logits = torch.tensor([[3.0, 2.0, 1.0], [0.0, 1.0, 2.0]])
    ev = Evaluator(FakeEval(feats, logits), real=(images([0, 1]), torch.tensor([0, 2])),
                   eval_resolution=8)
    s = ev(images([0]), torch.tensor([2]))  # ranked last of 3 -> still in the top min(5, 3)
    assert s["correct_top1"].item() == 0.0 and s["correct_top5"].item() == 1.0


def test_dist_eval_is_min_squared_l2_over_the_target_class_training_images():
    real = (images([4, 5, 6]), torch.tensor([0, 0, 1]))
    ev = Evaluator(FakeEval(), real=real, eval_resolution=8, batch_size=1)
    s = ev(images([0, 1, 0]), torch.tensor([0, 1, 1]))
    # attack 0 vs class 0 {(1,0), (0,3)} -> 1; attack 1 (2,2) vs class 1 {(0,.5)} -> 4 + 2.25;
    # attack 0 vs class 1 {(0,.5)} -> .25
    assert s["dist_eval"].tolist() == pytest.approx([1.0, 6.25, 0.25])
    assert math.isnan(s["dist_face"][0])


def test_min_sq_dist_matches_brute_force_and_rejects_unknown_class():
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(9, 5, generator=g)
    targets = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2])
    real = {c: torch.randn(4, 5, generator=g) for c in range(3)}
    d = min_sq_dist(feats, targets, real)
    for i in range(9):
        ref = real[int(targets[i])]
        brute = min(float(((feats[i] - r) ** 2).sum()) for r in ref)
        assert d[i].item() == pytest.approx(brute, rel=1e-6)
    with pytest.raises(KeyError, match="class 5"):
        min_sq_dist(feats[:1], torch.tensor([5]), real)


def test_unit_norm_face_embeddings_give_distances_in_0_4():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    real_x = torch.rand(12, 3, 10, 10, generator=g) * 2 - 1
    ev = Evaluator(FakeEval(), FakeFace(), real=(real_x, torch.tensor([0, 1, 2] * 4)),
                   eval_resolution=8)
    x = torch.rand(30, 3, 16, 16, generator=g) * 2 - 1  # (the fake eval model sees code 5)
    s_face = ev(x, torch.tensor([0, 1, 2] * 10))["dist_face"]
    assert torch.isfinite(s_face).all()
    assert (s_face >= 0).all() and (s_face <= 4 + 1e-5).all()
    # antipodal embeddings: the distance reaches 4
    class Sign(nn.Module):
        resolution = 6

        def forward(self, x):
            v = torch.zeros(len(x), 3)
            v[:, 0] = torch.sign(x.mean(dim=(1, 2, 3)))
            return v

    ev2 = Evaluator(FakeEval(), Sign(), real=(images([9]), torch.tensor([0])),
                    eval_resolution=8)
    assert ev2(images([0]), torch.tensor([0]))["dist_face"].item() == pytest.approx(4.0)


def test_without_face_network_dist_face_is_nan_and_summary_says_why():
    ev = Evaluator(FakeEval(), real=(images([4, 6]), torch.tensor([0, 1])), eval_resolution=8)
    acc = ResultAccumulator(figure_resolution=4)
    x, t = images([0, 1]), torch.tensor([0, 1])
    acc.add(x, t, ev(x, t))
    summary = ev.summarize(acc.frame())
    assert math.isnan(summary["dist_face"])
    assert summary["face_metric_note"] == DEFAULT_FACE_NOTE and "face" in DEFAULT_FACE_NOTE
    assert summary["attacc1"] == pytest.approx(0.5)  # code 1's argmax is class 0
    assert summary["dist_eval"] == pytest.approx((1.0 + 6.25) / 2)


def test_summarize_pools_over_images_and_keeps_nan():
    frame = pd.DataFrame({"class": [0, 0, 1], "correct_top1": [1.0, 0.0, 1.0],
                          "correct_top5": [1.0, 1.0, 1.0], "evalconf": [0.9, 0.1, 0.5],
                          "dist_face": [0.5, 1.0, 1.5], "dist_eval": [3.0, math.nan, 1.0]})
    s = summarize(frame)
    assert s["attacc1"] == pytest.approx(2 / 3) and s["attacc5"] == 1.0
    assert s["evalconf"] == pytest.approx(0.5) and s["dist_face"] == pytest.approx(1.0)
    assert math.isnan(s["dist_eval"]) and "face_metric_note" not in s
    assert summarize(frame.assign(dist_face=math.nan), "why")["face_metric_note"] == "why"


def test_evaluator_reads_the_training_split_of_the_attacked_classes(tmp_path,
                                                                    make_synthfaces):
    from atat.data.loading import ManifestDataset
    from atat.training.models import build_model

    root = make_synthfaces(tmp_path / "ds", images_per_identity=8, seed=1)
    torch.manual_seed(0)
    model = build_model("resnet18", 4)
    model.resolution = 32
    face = FakeFace()
    ev = Evaluator(model, face, real=root, classes=[1, 3], batch_size=5)
    train = ManifestDataset(root, "train")
    for c in (1, 3):
        n = sum(1 for y in train.targets if y == c)
        assert ev.real_eval[c].shape == (n, 512) and ev.real_face[c].shape == (n, 4)
    assert ev.classes == [1, 3]
    x = torch.rand(3, 3, 20, 20) * 2 - 1
    s = ev(x, torch.tensor([1, 3, 3]))
    assert torch.isfinite(s["dist_eval"]).all() and (s["dist_face"] <= 4 + 1e-5).all()
    with pytest.raises(KeyError):
        ev(x[:1], torch.tensor([0]))


def test_out_of_range_images_are_scored_unclamped_and_flagged_in_the_summary():
    """Official PPA/IF-GMI/PPDG evaluations score generator images without clamping; the
    summary shows how far outside [-1, 1] they went."""

    class Linear(nn.Module):  # features = mean pixel value, so a clamp would change them
        resolution = 8

        def features(self, x):
            return x.mean(dim=(1, 2, 3))[:, None].repeat(1, 2)

        def head(self, f):
            return torch.cat([f[:, :1], -f[:, :1]], dim=1)

    ev = Evaluator(Linear(), real=(torch.zeros(1, 3, 16, 16), torch.tensor([0])),
                   eval_resolution=8)
    x = torch.full((3, 3, 16, 16), 0.5)
    x[1, :, 4:12, 4:12] = 30.0  # inside the 12 px center crop: a broken generator's output
    x[2, :, 0, 0] = 50.0        # outside the crop: not scored, not counted
    acc = ResultAccumulator(figure_resolution=4, center_crop=12)
    t = torch.tensor([0, 0, 0])
    scores = ev(x, t)
    # unclamped: feature = mean pixel (64·30 + 192·0.5)/256; d² to the zero real image, ×2
    # features (clamped to 1 it would be 2·0.625²)
    expected = 2 * ((64 * 30 + 192 * 0.5) / 256) ** 2
    assert scores["dist_eval"][:2].tolist() == pytest.approx([2 * 0.25, expected], rel=1e-5)
    acc.add(x, t, scores)
    frame = acc.frame()
    assert frame["img_absmax"].tolist() == pytest.approx([0.5, 30.0, 0.5])
    s = ev.summarize(frame)
    assert s["img_absmax_max"] == pytest.approx(30.0) and 30.0 > IMAGE_RANGE_WARN
    assert s["img_absmax_median"] == pytest.approx(0.5)
    assert "outside the generator's [-1, 1]" in s["image_range_note"]
    ok = summarize(frame.iloc[:1])
    assert ok["img_absmax_max"] == pytest.approx(0.5) and "image_range_note" not in ok
    assert math.isnan(summarize(frame.drop(columns="img_absmax"))["img_absmax_max"])


def test_summary_gives_the_real_nearest_neighbour_scale_of_the_distances():
    """δ_eval/δ_face are read against the same distance between a class's own images."""
    # class 0: features (1,0), (0,3), (1,1) -> NN d² 1, 5, 1; class 1: one image (skipped)
    real = (images([4, 5, 8, 6]), torch.tensor([0, 0, 0, 1]))
    feats = FEATS.clone()
    feats[8] = torch.tensor([1.0, 1.0])
    ev = Evaluator(FakeEval(feats), real=real, eval_resolution=8)
    acc = ResultAccumulator(figure_resolution=4)
    x, t = images([0]), torch.tensor([0])
    acc.add(x, t, ev(x, t))
    s = ev.summarize(acc.frame())
    assert s["dist_eval_real_nn"] == pytest.approx((1 + 5 + 1) / 3)
    assert math.isnan(s["dist_face_real_nn"])  # no face network
    single = Evaluator(FakeEval(), real=(images([6]), torch.tensor([1])), eval_resolution=8)
    assert math.isnan(single.real_nn_distances()["dist_eval_real_nn"])


# ------------------------------------------------------------------ issue 16: embedded once
def test_cached_real_embeddings_equal_embedding_in_the_job(tmp_path, make_synthfaces):
    """The features saved once per dataset give the job's scorer exactly what it computes
    itself when it attacks every class (same batches); for a subset of classes the batches
    differ, which may change the features by float rounding only."""
    from atat.inversion.metrics import load_real_embeddings, save_real_embeddings
    from atat.training.models import build_model

    root = make_synthfaces(tmp_path / "ds", images_per_identity=8, seed=1)
    torch.manual_seed(0)
    model = build_model("resnet18", 4).eval()
    model.resolution = 32
    face = FakeFace()
    made = Evaluator(model, face, real=root, batch_size=5)
    save_real_embeddings(made, tmp_path / "emb.pt", evaluation_sha256="abc")
    cache = load_real_embeddings(tmp_path / "emb.pt")
    assert cache["evaluation_sha256"] == "abc" and cache["batch_size"] == 5
    x = torch.rand(6, 3, 20, 20) * 2 - 1
    t = torch.tensor([0, 1, 2, 3, 3, 1])
    job = Evaluator(model, face, real=root, classes=[0, 1, 2, 3], batch_size=5)
    cached = Evaluator(model, face, real=None, classes=[0, 1, 2, 3], batch_size=5,
                       real_embeddings=cache)
    assert list(cached.real_eval) == list(job.real_eval)      # same order: same pooled means
    for c in job.real_eval:
        assert torch.equal(cached.real_eval[c], job.real_eval[c])
        assert torch.equal(cached.real_face[c], job.real_face[c])
    a, b = job(x, t), cached(x, t)
    for col in SCORE_COLUMNS:
        assert torch.equal(a[col], b[col]), col
    assert job.real_nn_distances() == cached.real_nn_distances()
    # a subset: the classes asked for, values equal up to float rounding
    sub_job = Evaluator(model, face, real=root, classes=[3, 1], batch_size=5)
    sub = Evaluator(model, face, real=None, classes=[3, 1], batch_size=5,
                    real_embeddings=cache)
    assert sorted(sub.real_eval) == sorted(sub_job.real_eval) == [1, 3] and sub.classes == [1, 3]
    for c in (1, 3):
        assert torch.allclose(sub.real_eval[c], sub_job.real_eval[c], rtol=1e-4, atol=1e-5)
    # made with other settings or networks: refused
    with pytest.raises(ValueError, match="remake"):
        Evaluator(model, face, real=None, batch_size=4, real_embeddings=cache)
    with pytest.raises(ValueError, match="face"):
        Evaluator(model, None, real=None, real_embeddings=dict(cache, face_resolution=None),
                  batch_size=5)
