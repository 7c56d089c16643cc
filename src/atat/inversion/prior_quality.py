"""How good a trained inversion prior is, measured by the public pool's identity classifier
(issue 17 item 5).

A prior can carry an identity into a reconstruction only if its samples look like faces of the
population it was trained on. Where the face embedding is a classifier of the public
identities (``face_embedding.source: public_classifier``: a ResNet trained on the public pool,
its unit-norm penultimate features are the embedding) that classifier is the instrument:

* **recognition**: the fraction of samples to which the classifier gives some public identity
  a softmax confidence of at least ``confidence``;
* **precision / recall** (improved precision and recall, Kynkäänniemi et al. 2019) in the
  embedding space. Each real reference point carries a ball out to its ``k``-th nearest
  reference neighbour; ``precision(Q)`` is the fraction of a sample set Q inside at least one
  real ball (does Q lie on the real-image manifold?), ``recall(Q)`` the fraction of real
  reference points inside at least one ball of Q (built the same way within Q: does Q cover
  the real images?), and **coverage** (Naeem et al. 2020), the fraction of real reference
  points whose own k-NN ball holds at least one point of Q.

Each is measured on three sets: the **prior**'s samples (``samples`` seeded latents, truncation
ψ = 1, constant noise, clamped to [-1, 1] as the candidate search does, then resized to the
classifier's resolution), the **ceiling** (the public images the classifier held out: real
faces of the population it never trained on) and the **floor** (an independent per-pixel
Gaussian fitted to the public images: every pixel's mean and spread, no spatial structure).
``normalised = (prior - floor) / (ceiling - floor)``: 0 is no better than the structure-free
floor, 1 is as good as real unseen faces; NaN when ceiling <= floor (the instrument does not
tell real faces from the floor). The real reference set is the classifier's training split of
the public pool. Precision does not depend on the size of Q (computed on all samples); recall
and coverage do, so each uses as many points of Q as there are held-out images (the three sets
then compare at one size). The targets are on recognition, precision and coverage. Recall is
reported only: its balls are built within Q, so a diffuse set of non-faces has large balls and
high recall (measured 2026-12-01 on the demo's instrument, before the trained prior was: an
untrained generator reaches normalised recall 0.52 but coverage 0.23, recognition 0.19).

**Several classifiers** (``classifiers`` in the settings, the classifier retrained with the
seeds ``face_embedding.seed + 0, 1, ...``). Where a from-scratch classifier puts the
structure-free floor is arbitrary: on the demo's priors one classifier's seed alone moved the
normalised recognition between 0.10 and 0.70 and the precision between -0.71 and 0.90 while the
prior's raw values barely moved (docs/measurements.md, "The prior-quality instrument across its
own seeds").
Each classifier measures the prior on its own (its own held-out split, the same samples and
floor images); the record's value of each statistic is the **median** over the classifiers of
each of ``prior``, ``ceiling``, ``floor`` and ``normalised`` (the verdict reads the median of the
normalised values, NaN unless more than half are finite), ``members`` lists every classifier's
normalised value, and ``classifier_records`` keeps each classifier's whole record. One
classifier gives exactly that classifier's record.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn

from atat.base import io
from atat.plan.inversion_defaults import PRIOR_STATISTICS

log = logging.getLogger(__name__)

#: the three sets every statistic is measured on (keys of the quality record)
SETS = ("prior", "ceiling", "floor")
#: the statistics with a target in ``config['preconditions']`` (key ``prior_<name>``)
STATISTICS = PRIOR_STATISTICS
#: every statistic of the record (recall is reported, not a target: see the module docstring)
MEASURED = ("recognition", "precision", "recall", "coverage")
#: ``config['preconditions']['prior_quality']`` settings and their types
SETTINGS = {"samples": int, "k": int, "confidence": float, "seed": int, "classifiers": int}


# ------------------------------------------------------------------ precision / recall
def kth_neighbour_radii(points: Tensor, k: int) -> Tensor:
    """Distance of every point to its ``k``-th nearest other point of the set ([N])."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(points) <= k:
        raise ValueError(f"{len(points)} points: need more than k = {k} for k-NN radii")
    d = torch.cdist(points, points, compute_mode="donot_use_mm_for_euclid_dist")
    return d.kthvalue(k + 1, dim=1).values  # the smallest (0) is the point itself


def manifold_coverage(queries: Tensor, reference: Tensor, k: int) -> float:
    """Fraction of ``queries`` inside at least one k-NN ball of ``reference``."""
    radii = kth_neighbour_radii(reference, k)
    d = torch.cdist(queries, reference, compute_mode="donot_use_mm_for_euclid_dist")
    return float((d <= radii[None, :]).any(dim=1).float().mean())


def ball_coverage(reference: Tensor, queries: Tensor, k: int) -> float:
    """Coverage (Naeem et al. 2020): the fraction of ``reference`` points whose own k-NN ball
    holds at least one of ``queries`` (only real radii: a diffuse query set gains nothing)."""
    radii = kth_neighbour_radii(reference, k)
    d = torch.cdist(queries, reference, compute_mode="donot_use_mm_for_euclid_dist")
    return float((d <= radii[None, :]).any(dim=0).float().mean())


def precision_recall(real: Tensor, fake: Tensor, k: int = 3) -> tuple[float, float]:
    """Improved precision (fake on the real manifold) and recall (real on the fake manifold)."""
    return manifold_coverage(fake, real, k), manifold_coverage(real, fake, k)


# ------------------------------------------------------------------ recognition
def _device(module: nn.Module) -> torch.device:
    """The device of a module's first parameter or buffer (CPU for neither)."""
    for t in (*module.parameters(), *module.buffers()):
        return t.device
    return torch.device("cpu")


@torch.no_grad()
def classify(classifier: nn.Module, images: Tensor, batch_size: int = 200
             ) -> tuple[Tensor, Tensor]:
    """(max softmax confidence, predicted class) of every image, in batches."""
    device = _device(classifier)
    conf, pred = [], []
    for i in range(0, len(images), batch_size):
        logits = classifier(images[i:i + batch_size].to(device)).float()
        c, p = logits.softmax(dim=1).max(dim=1)
        conf.append(c.cpu())
        pred.append(p.cpu())
    return torch.cat(conf), torch.cat(pred)


def recognition_rate(confidence: Tensor, threshold: float) -> float:
    """Fraction of images whose top softmax confidence is at least ``threshold``."""
    return float((confidence >= threshold).float().mean())


# ------------------------------------------------------------------ the three sets
@torch.no_grad()
def generator_samples(G: nn.Module, n: int, *, seed: int, resolution: int,
                      center_crop: int | None = None, truncation_psi: float = 1.0,
                      batch_size: int = 100) -> Tensor:
    """``n`` samples of seeded latents, clamped to [-1, 1], at ``resolution`` ([n, C, r, r])."""
    from .core import preprocess

    z = torch.randn(n, G.z_dim, generator=torch.Generator().manual_seed(seed))
    device = _device(G)
    out = []
    for i in range(0, n, batch_size):
        ws = G.mapping(z[i:i + batch_size].to(device), None, truncation_psi=truncation_psi)
        imgs = G.synthesis(ws, noise_mode="const", force_fp32=True).clamp(-1, 1)
        out.append(preprocess(imgs, center_crop, resolution).cpu())
    return torch.cat(out)


def gaussian_floor(real: Tensor, n: int, seed: int) -> Tensor:
    """``n`` images of the independent per-pixel Gaussian fitted to ``real`` (clamped)."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn((n, *real.shape[1:]), generator=gen)
    return (real.mean(dim=0) + real.std(dim=0) * noise).clamp(-1, 1)


def _normalised(prior: float, ceiling: float, floor: float) -> float:
    if any(math.isnan(v) for v in (prior, ceiling, floor)) or ceiling <= floor:
        return float("nan")
    return (prior - floor) / (ceiling - floor)


def measure(G: nn.Module, classifier: nn.Module, embed: nn.Module, real: Tensor,
            heldout: Sequence[int], *, samples: int, k: int, confidence: float, seed: int,
            center_crop: int | None = None, batch_size: int = 200) -> dict[str, Any]:
    """The quality record of prior ``G`` (module docstring). ``real``: every public image at
    the classifier's resolution in [-1, 1]; ``heldout``: the indices the classifier did not
    train on; ``embed``: images -> embeddings (the classifier's unit-norm features)."""
    held = sorted({int(i) for i in heldout})
    train = sorted(set(range(len(real))) - set(held))
    if not held or not train:
        raise ValueError(f"{len(held)} held-out and {len(train)} training images: need both")
    resolution = int(real.shape[-1])
    images = {"prior": generator_samples(G, samples, seed=seed, resolution=resolution,
                                         center_crop=center_crop, batch_size=batch_size),
              "ceiling": real[held],
              "floor": gaussian_floor(real, samples, seed)}

    device = _device(classifier)

    def embedding(x: Tensor) -> Tensor:
        with torch.no_grad():
            return torch.cat([embed(x[i:i + batch_size].to(device)).float().cpu()
                              for i in range(0, len(x), batch_size)])

    reference = embedding(real[train])
    n_recall = len(held)
    out: dict[str, Any] = {stat: {} for stat in MEASURED}
    out["identities_recognised"] = {}
    notes = []
    for name, x in images.items():
        conf, pred = classify(classifier, x, batch_size)
        out["recognition"][name] = recognition_rate(conf, confidence)
        out["identities_recognised"][name] = int(pred[conf >= confidence].unique().numel())
        emb = embedding(x)
        out["precision"][name] = manifold_coverage(emb, reference, k)
        out["coverage"][name] = ball_coverage(reference, emb[:n_recall], k)
        try:
            out["recall"][name] = manifold_coverage(reference, emb[:n_recall], k)
        except ValueError as err:
            out["recall"][name] = float("nan")
            notes.append(f"recall of {name}: {err}")
    for stat in MEASURED:
        s = out[stat]
        s["normalised"] = _normalised(s["prior"], s["ceiling"], s["floor"])
    with torch.no_grad():
        n_classes = int(classifier(real[:1].to(device)).shape[1])
    out.update(n_samples=int(samples), n_reference=len(train), n_heldout=len(held),
               n_recall=n_recall, n_identities=n_classes, k=int(k),
               confidence=float(confidence), seed=int(seed), resolution=resolution,
               truncation_psi=1.0, notes=notes)
    return out


# ------------------------------------------------------------------ config and files
def settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config['preconditions']['prior_quality']`` with every key (else a ConfigError)."""
    from atat.plan.config import ConfigError

    section = (config.get("preconditions") or {}).get("prior_quality")
    if not isinstance(section, Mapping):
        raise ConfigError("invalid configuration: preconditions.prior_quality: section missing")
    missing = [key for key in SETTINGS if key not in section]
    if missing:
        raise ConfigError(f"invalid configuration: preconditions.prior_quality: keys {missing} "
                          f"missing")
    return {key: kind(section[key]) for key, kind in SETTINGS.items()}


def _median(values: Sequence[Any]) -> float:
    """Median of the finite values; NaN unless more than half of ``values`` are finite."""
    finite = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if 2 * len(finite) <= len(values):
        return float("nan")
    return float(statistics.median(finite))


def combine(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One quality record from the records of several classifiers measuring the same prior
    (module docstring): per statistic the median of each value over the classifiers, their
    normalised values in ``members``; the classifiers' records in ``classifier_records``."""
    if not records:
        raise ValueError("no classifier records to combine")
    first = records[0]
    out: dict[str, Any] = {k: v for k, v in first.items()
                           if k not in (*MEASURED, "identities_recognised", "notes")}
    for stat in MEASURED:
        out[stat] = {key: _median([r[stat][key] for r in records])
                     for key in (*SETS, "normalised")}
        out[stat]["members"] = [float(r[stat]["normalised"]) for r in records]
    out["identities_recognised"] = {
        name: int(statistics.median_low([r["identities_recognised"][name] for r in records]))
        for name in SETS}
    out["notes"] = [note if len(records) == 1 else f"classifier {i}: {note}"
                    for i, r in enumerate(records) for note in r["notes"]]
    out["classifiers"] = len(records)
    out["classifier_records"] = [dict(r) for r in records]
    return out


def prior_quality(generator_path: str | Path, face_model_path: str | Path | Sequence[str | Path],
                  face_metrics_path: str | Path | Sequence[str | Path], dataset_dir: str | Path,
                  out_path: str | Path, *, config_settings: Mapping[str, Any],
                  center_crop: int | None = None, device: str | torch.device = "cpu"
                  ) -> dict[str, Any]:
    """Measure the prior in ``generator_path`` against ``<dataset_dir>/public`` with the public
    classifier(s) of ``face_model_path`` (each one's held-out split rebuilt from its
    ``face_metrics_path``; several: :func:`combine`) and write the record atomically to
    ``out_path`` (JSON)."""
    from atat.data.loading import ManifestDataset, build_transform

    from .evaluation import FaceEmbedding, load_face_network, public_holdout_split
    from .stylegan2 import Generator

    start = time.time()
    s = dict(config_settings)
    models = [face_model_path] if isinstance(face_model_path, (str, Path)) else list(face_model_path)
    metrics = ([face_metrics_path] if isinstance(face_metrics_path, (str, Path))
               else list(face_metrics_path))
    if not models or len(models) != len(metrics):
        raise ValueError(f"{len(models)} classifier files and {len(metrics)} metrics files: "
                         f"need one metrics.json per classifier, at least one")
    G = Generator.from_pickle(generator_path).to(device)
    public = Path(dataset_dir) / "public"
    real_at: dict[int, tuple[Any, Tensor]] = {}  # classifier resolution -> (dataset, images)
    records = []
    for model_path, metrics_path in zip(models, metrics):
        face = load_face_network(model_path, device)
        if not isinstance(face, FaceEmbedding):
            raise ValueError(f"{model_path}: not a public-classifier face embedding (rule "
                             f"train_face_embedding); the prior's quality needs its classifier")
        face_metrics = io.read_json(metrics_path)
        if face.resolution not in real_at:
            ds = ManifestDataset(public, "public", build_transform(face.resolution, train=False))
            real_at[face.resolution] = (ds, torch.stack([ds[i][0] for i in range(len(ds))]))
        ds, real = real_at[face.resolution]
        _, held = public_holdout_split(ds.targets, float(face_metrics["holdout_fraction"]),
                                       int(face_metrics["seed"]))
        rec = measure(G, face.classifier, face, real, held, samples=s["samples"], k=s["k"],
                      confidence=s["confidence"], seed=s["seed"], center_crop=center_crop)
        rec.update(face_model=str(model_path), classifier_seed=int(face_metrics["seed"]))
        records.append(rec)
        if len(models) > 1:
            log.info("classifier %s (seed %d): normalised %s", model_path,
                     rec["classifier_seed"],
                     ", ".join(f"{st} {rec[st]['normalised']:.3f}" for st in STATISTICS))
    record = records[0] if len(records) == 1 else combine(records)
    record.update(generator=str(generator_path),
                  face_model=[str(m) for m in models] if len(models) > 1 else str(models[0]),
                  dataset=str(dataset_dir), generator_resolution=int(G.img_resolution),
                  seconds=time.time() - start)
    io.write_json(out_path, _finite(record))
    of = f" (median of {len(models)} classifiers)" if len(models) > 1 else ""
    for stat in MEASURED:
        r = record[stat]
        log.info("prior %s%s: %.3f (ceiling %.3f, floor %.3f; normalised %.3f)", stat, of,
                 r["prior"], r["ceiling"], r["floor"], r["normalised"])
    return record


def _finite(obj: Any) -> Any:
    """NaN -> None, so the record is strict JSON (a missing value reads back as NaN)."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, Mapping):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj
