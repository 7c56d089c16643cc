"""Attack-success metrics of the final attack images
(docs/sources.md#attack-accuracy-and-confidence, #facenet-distance, #evaluation-model-distance).

:class:`Evaluator` implements the ``Scorer`` protocol of :mod:`atat.inversion.core`: it maps
generator images in [-1, 1] ([N, 3, R, R]) and their target classes to per-image

* ``correct_top1`` / ``correct_top5`` — the target is the eval model's argmax / among its
  top-k logits, k = min(5, n_classes) (docs/sources.md#attack-accuracy-and-confidence);
* ``evalconf`` — softmax(eval logits)[target] (docs/sources.md#attack-accuracy-and-confidence
  "total_avg_conf");
* ``dist_eval`` — squared L2 distance, in the eval model's 2048-d feature space, to the
  nearest *training* image of the target class (docs/sources.md#evaluation-model-distance);
* ``dist_face`` — the same with the unit-norm face embeddings (docs/sources.md#facenet-distance;
  range [0, 4]); NaN when no face network is used (non-face datasets, paper I.2).

Attack images are center-cropped (the generator's crop) and resized (bilinear, antialias) to
each network's resolution; the real images are the private training split (the 72% subset,
docs/sources.md#real-images-of-the-distances) of the attacked classes resized to the network
resolution, embedded once — per job, or once per dataset and networks (rule ``real_embeddings``:
:func:`save_real_embeddings`, read back with :func:`load_real_embeddings` and passed as
``Evaluator(real_embeddings=...)``).
:func:`summarize` pools the per-image values (means over images,
docs/sources.md#attack-accuracy-and-confidence, #facenet-distance, #evaluation-model-distance).

Attack images are **not clamped** to [-1, 1] before scoring, exactly as the official
evaluations: PPA (LukasStruppek/Plug-and-Play-Attacks ``utils/stylegan.py::create_image``, used
by ``metrics/classification_acc.py`` and ``metrics/distance_metrics.py``: synthesis → center
crop → resize), IF-GMI (final-solution/IF-GMI ``attacks/optimize.py`` keeps the pre-clip
``origin_imgs`` that ``intermediate_attack.py`` scores) and PPDG (tmlr-group/PPDG-MI
``high_resolution/utils/stylegan.py::create_image``; ``attack_tuneG.py`` even leaves its
``torch.clamp`` of the pseudo-private data commented out). A trained generator stays close to
[-1, 1]; an untrained or broken one does not, and then δ_eval explodes (1e13-1e20 seen with
random weights). The accumulator records each image's max |pixel| (``img_absmax``) and
:func:`summarize` reports their maximum and median so such a run is recognisable;
:meth:`Evaluator.summarize` adds ``dist_eval_real_nn`` / ``dist_face_real_nn``, the same
distance between a class's own training images (nearest other image), the scale a plausible
δ is read against.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Subset

from atat.data.loading import ManifestDataset, build_transform
from atat.inversion.core import SCORE_COLUMNS, preprocess

__all__ = ["DEFAULT_FACE_NOTE", "IMAGE_RANGE_WARN", "Evaluator", "load_real_embeddings",
           "min_sq_dist", "save_real_embeddings", "summarize"]

DEFAULT_FACE_NOTE = ("dist_face (δ_face) not computed: no face-embedding network for this "
                     "dataset (not a face dataset); dist_eval (δ_eval) is the face-free distance "
                     "(paper App. I.2)")
#: max |pixel| of an attack image beyond which the summary flags the run (a trained StyleGAN2
#: overshoots [-1, 1] only slightly)
IMAGE_RANGE_WARN = 2.0
_CHUNK_ELEMENTS = 1 << 24  # bound on the [rows, K, D] difference tensor of min_sq_dist


def min_sq_dist(feats: Tensor, targets: Tensor, real: Mapping[int, Tensor]) -> Tensor:
    """Per row i: min over ``real[targets[i]]`` ([K, D]) of ‖feats[i] − r‖² (exact
    differences, no ‖a‖² + ‖b‖² − 2ab cancellation)."""
    out = torch.empty(len(feats), dtype=feats.dtype, device=feats.device)
    for t in targets.unique().tolist():
        if t not in real:
            raise KeyError(f"no training images of class {t} were embedded "
                           f"(classes: {sorted(real)[:10]}...)")
        ref = real[t]
        idx = (targets == t).nonzero().squeeze(1)
        step = max(1, _CHUNK_ELEMENTS // max(1, ref.numel()))
        for i in range(0, len(idx), step):
            sub = idx[i:i + step]
            d = (feats[sub, None, :] - ref[None]).pow(2).sum(-1)
            out[sub] = d.min(dim=1).values
    return out


class _TwoViews:
    """Picklable transform giving one PIL image as (eval-resolution, face-resolution) tensors."""

    def __init__(self, first, second):
        self.first, self.second = first, second

    def __call__(self, img):
        return self.first(img), (self.second(img) if self.second is not None else torch.empty(0))


class Evaluator:
    """Scorer of the attack metrics (see module doc; docs/sources.md#attack-accuracy-and-confidence,
    #facenet-distance, #evaluation-model-distance).

    ``eval_model``: a module with ``features(x)`` → [N, D] and ``head(features)`` → logits
    (:class:`atat.inversion.evaluation.EvaluationModel`, or any :class:`atat.training.models.Classifier`);
    ``face_model``: x → [N, d] unit-norm embeddings, or ``None`` (``dist_face`` = NaN).
    ``real``: the private dataset root (its ``train`` split is read, PIL-resized to each network
    resolution as the eval transform does) or a pair (images [M, 3, H, W] in [-1, 1], labels
    [M]) resized here with :func:`atat.inversion.core.preprocess` (no crop). ``classes``
    restricts the real images to the attacked classes (``None``: all). Resolutions default to
    the models' ``resolution`` attribute. Both models are put in eval mode.
    ``real_embeddings``: the real images' features computed before (:func:`load_real_embeddings`
    of a :func:`save_real_embeddings` file, made with the same networks, resolutions and batch
    size); then ``real`` is not read. Identical to embedding here when ``classes`` is every
    class (the same batches); for a subset the batches differ, which changes the features by
    float rounding (~1e-4 absolute on the demo's Inception-v3 on CPU).
    """

    def __init__(self, eval_model: nn.Module, face_model: nn.Module | None = None, *,
                 real: str | os.PathLike[str] | tuple[Tensor, Tensor],
                 center_crop: int | None = None, eval_resolution: int | None = None,
                 face_resolution: int | None = None, classes: Sequence[int] | None = None,
                 batch_size: int = 64, device: str | torch.device = "cpu", num_workers: int = 0,
                 face_metric_note: str | None = None,
                 real_embeddings: Mapping[str, Any] | None = None):
        self.device = torch.device(device)
        self.eval_model = eval_model.to(self.device).eval()
        self.face_model = face_model.to(self.device).eval() if face_model is not None else None
        self.center_crop = center_crop
        self.eval_resolution = int(eval_resolution or getattr(eval_model, "resolution"))
        self.face_resolution = None
        if face_model is not None:
            self.face_resolution = int(face_resolution or getattr(face_model, "resolution"))
        self.batch_size = int(batch_size)
        self.face_metric_note = None if face_model is not None else (face_metric_note
                                                                     or DEFAULT_FACE_NOTE)
        wanted = None if classes is None else sorted({int(c) for c in classes})
        if real_embeddings is not None:
            self.real_eval, self.real_face = self._cached_real(real_embeddings, wanted)
        else:
            self.real_eval, self.real_face = self._embed_real(real, wanted, num_workers)
        if wanted is not None:
            missing = [c for c in wanted if c not in self.real_eval]
            if missing:
                raise ValueError(f"no training images of attacked class(es) {missing[:10]}")
        self.classes = sorted(self.real_eval)

    # ------------------------------------------------------------------ networks
    def _eval_forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        feats = self.eval_model.features(x).float()
        return self.eval_model.head(feats).float(), feats

    def _face_forward(self, x: Tensor) -> Tensor:
        return self.face_model(x).float()

    # ------------------------------------------------------------------ real images
    def _cached_real(self, cache: Mapping[str, Any], wanted):
        want = {"eval_resolution": self.eval_resolution, "face_resolution": self.face_resolution,
                "batch_size": self.batch_size}
        got = {k: cache.get(k) for k in want}
        if got != want:
            raise ValueError(f"real-image embeddings were made with {got}, this scorer uses "
                             f"{want}: remake them")
        if (cache.get("face") is None) != (self.face_model is None):
            raise ValueError("real-image embeddings " + ("lack" if cache.get("face") is None
                                                         else "have") +
                             " face embeddings but the scorer has " +
                             ("a" if self.face_model is not None else "no") + " face network")

        def pick(feats):
            if feats is None:
                return None
            # the order of first appearance in the data, as _embed_real makes it
            return {int(c): v.to(self.device) for c, v in feats.items()
                    if wanted is None or int(c) in wanted}

        return pick(cache["eval"]), pick(cache.get("face"))

    @torch.no_grad()
    def _embed_real(self, real, wanted, num_workers):
        eval_parts: dict[int, list[Tensor]] = {}
        face_parts: dict[int, list[Tensor]] = {}

        def add(x_eval: Tensor, x_face: Tensor | None, y: Tensor) -> None:
            _, fe = self._eval_forward(x_eval.to(self.device))
            ff = self._face_forward(x_face.to(self.device)) if x_face is not None else None
            for c in y.unique().tolist():
                m = (y == c).to(self.device)
                eval_parts.setdefault(c, []).append(fe[m])
                if ff is not None:
                    face_parts.setdefault(c, []).append(ff[m])

        if isinstance(real, (tuple, list)):
            images, labels = real
            labels = torch.as_tensor(labels).long().cpu()
            keep = torch.ones(len(labels), dtype=torch.bool) if wanted is None else \
                torch.isin(labels, torch.tensor(wanted, dtype=torch.long))
            images, labels = images[keep], labels[keep]
            for i in range(0, len(labels), self.batch_size):
                x = images[i:i + self.batch_size].float()
                x_face = (preprocess(x, None, self.face_resolution)
                          if self.face_model is not None else None)
                add(preprocess(x, None, self.eval_resolution), x_face,
                    labels[i:i + self.batch_size])
        else:
            tf = _TwoViews(build_transform(self.eval_resolution, train=False),
                           build_transform(self.face_resolution, train=False)
                           if self.face_model is not None else None)
            ds = ManifestDataset(real, "train", tf)
            keep_set = None if wanted is None else set(wanted)
            idx = [i for i, y in enumerate(ds.targets) if keep_set is None or y in keep_set]
            loader = DataLoader(Subset(ds, idx), batch_size=self.batch_size,
                                num_workers=num_workers)
            for (x_eval, x_face), y in loader:
                add(x_eval, x_face if self.face_model is not None else None, y)
        real_eval = {c: torch.cat(v) for c, v in eval_parts.items()}
        real_face = ({c: torch.cat(v) for c, v in face_parts.items()}
                     if self.face_model is not None else None)
        return real_eval, real_face

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def __call__(self, images: Tensor, targets: Tensor) -> dict[str, Tensor]:
        targets = torch.as_tensor(targets).long()
        out: dict[str, list[Tensor]] = {c: [] for c in SCORE_COLUMNS}
        for i in range(0, len(targets), self.batch_size):
            x = images[i:i + self.batch_size].to(self.device, torch.float32)
            t = targets[i:i + self.batch_size].to(self.device)
            logits, feats = self._eval_forward(preprocess(x, self.center_crop,
                                                          self.eval_resolution))
            k = min(5, logits.shape[1])
            out["correct_top1"].append((logits.argmax(dim=1) == t).float())
            out["correct_top5"].append((logits.topk(k, dim=1).indices == t[:, None])
                                       .any(dim=1).float())
            out["evalconf"].append(logits.softmax(dim=1).gather(1, t[:, None]).squeeze(1))
            out["dist_eval"].append(min_sq_dist(feats, t, self.real_eval))
            if self.face_model is not None:
                emb = self._face_forward(preprocess(x, self.center_crop, self.face_resolution))
                out["dist_face"].append(min_sq_dist(emb, t, self.real_face))
            else:
                out["dist_face"].append(torch.full((len(t),), math.nan, device=self.device))
        return {c: (torch.cat(v).float().cpu() if v else torch.empty(0)) for c, v in out.items()}

    def real_nn_distances(self) -> dict[str, float]:
        """Plausibility scale of δ_eval/δ_face: the mean over the real training images of the
        attacked classes of the squared distance to the nearest *other* image of the same
        class (classes with one image are skipped; NaN when none has two). A reconstruction
        as close to the class as its own images gives δ about this large."""
        def mean_nn(real: Mapping[int, Tensor] | None) -> float:
            if real is None:
                return math.nan
            vals = []
            for feats in real.values():
                if len(feats) < 2:
                    continue
                step = max(1, _CHUNK_ELEMENTS // max(1, feats.numel()))
                for i in range(0, len(feats), step):
                    d = (feats[i:i + step, None, :] - feats[None]).pow(2).sum(-1)
                    rows = torch.arange(len(d), device=d.device)
                    d[rows, rows + i] = math.inf  # not the image itself
                    vals.append(d.min(dim=1).values)
            return float(torch.cat(vals).mean()) if vals else math.nan

        return {"dist_eval_real_nn": mean_nn(self.real_eval),
                "dist_face_real_nn": mean_nn(self.real_face)}

    def summarize(self, frame) -> dict[str, Any]:
        """:func:`summarize` plus :meth:`real_nn_distances` (the scale δ is read against)."""
        return {**summarize(frame, self.face_metric_note), **self.real_nn_distances()}


def save_real_embeddings(evaluator: Evaluator, path: str | os.PathLike[str],
                         **meta: Any) -> None:
    """Write ``evaluator``'s real-image features (every class it embedded) atomically, with
    the resolutions and batch size they were made with and ``meta`` (e.g. the networks'
    file hashes)."""
    from atat.base import io

    cpu = (lambda d: None if d is None else {int(c): v.cpu() for c, v in d.items()})
    io.torch_save({"eval": cpu(evaluator.real_eval), "face": cpu(evaluator.real_face),
                   "eval_resolution": evaluator.eval_resolution,
                   "face_resolution": evaluator.face_resolution,
                   "batch_size": evaluator.batch_size, **meta}, path)


def load_real_embeddings(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A :func:`save_real_embeddings` file (tensors and plain values only); a truncated one is
    named with what to do (atat.base.io.torch_load)."""
    from atat.base import io

    return io.torch_load(path)


def summarize(frame, face_metric_note: str | None = None) -> dict[str, Any]:
    """Pooled means over the images of ``frame`` (``ResultAccumulator.frame()``): attacc1,
    attacc5, evalconf, dist_face, dist_eval. A NaN value of a column (not computed) keeps the
    mean NaN; when ``dist_face`` is NaN the dict also carries ``face_metric_note`` saying why.
    ``img_absmax_max`` / ``img_absmax_median``: max / median over images of their max |pixel|
    (NaN when the frame has no ``img_absmax``); above :data:`IMAGE_RANGE_WARN` the dict carries
    ``image_range_note``.
    (Pooled means equal per-target means when every target has the same number of images,
    docs/sources.md#attack-accuracy-and-confidence.)"""
    names = {"attacc1": "correct_top1", "attacc5": "correct_top5", "evalconf": "evalconf",
             "dist_face": "dist_face", "dist_eval": "dist_eval"}
    out: dict[str, Any] = {}
    for key, col in names.items():
        if col in frame.columns and len(frame):
            out[key] = float(frame[col].astype(float).mean(skipna=False))
        else:
            out[key] = math.nan
    if math.isnan(out["dist_face"]):
        out["face_metric_note"] = face_metric_note or DEFAULT_FACE_NOTE
    absmax = frame["img_absmax"].astype(float).dropna() if "img_absmax" in frame.columns else []
    out["img_absmax_max"] = float(absmax.max()) if len(absmax) else math.nan
    out["img_absmax_median"] = float(absmax.median()) if len(absmax) else math.nan
    if out["img_absmax_max"] > IMAGE_RANGE_WARN:
        out["image_range_note"] = (
            f"attack images reach |pixel| = {out['img_absmax_max']:.3g} (median "
            f"{out['img_absmax_median']:.3g}), far outside the generator's [-1, 1]: they are "
            f"scored unclamped as in the official evaluations, so δ_eval/δ_face are not "
            f"comparable with a trained generator's (check the generator)")
    return out
