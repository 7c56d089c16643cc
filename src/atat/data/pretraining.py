"""The miniature's ImageNet: a pretraining population of synthetic face identities, disjoint
from every identity of the config's face populations.

The paper fine-tunes ImageNet-initialised networks (paper A.3), its evaluation model is an
ImageNet-initialised Inception-v3 and TL-DMI freezes ImageNet-initialised first layers. The
miniature's counterpart is a population of further *synthfaces* identities (the renderer of
:mod:`atat.data.synthfaces`) drawn from their own seed and RNG streams, on which rule
``pretrain_backbone`` trains each backbone once (:mod:`atat.training.pretrain`).

Identities
    Identity ``k`` is ``synthfaces``' identity draw from ``_rng(seed, 21, k, attempt)`` for the
    first attempt whose discrete signature (face shape, skin tone, hair colour and style, eye
    colour and shape, nose, brows, glasses, hat, beard, moustache, earrings) differs in at least
    ``MIN_DISCRETE_DIFF`` entries from every earlier pretraining identity **and from every
    identity of the excluded populations** (the private and public pools of each face
    population of the config). That is the standard that makes two identities of one
    synthfaces pool distinct, here applied across populations: no pretraining identity is a
    near-duplicate of a private (or public) one. Names are ``pre_XXXX``; growing the population
    keeps its first identities (for the same exclusions).

Images
    Image ``j`` of identity ``k`` is ``render_face`` with the RNG ``_rng(seed, 22, k, j)`` and
    synthfaces' nuisance: the same rendering as the target data, other identities. The first
    ``images_per_identity`` images of each identity are the ``train`` split, the next
    ``val_images_per_identity`` the ``val`` split (the held-out accuracy of the pretraining run).

On-disk layout: one dataset in :mod:`atat.data.manifest` format (splits train and val),
assembled in a temporary sibling directory and renamed into place when complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from atat.base.io import install_dir
from atat.data.manifest import write_dataset
from atat.data.painting import MIN_DISCRETE_DIFF, _rng
from atat.data.synthfaces import (DEFAULTS, GENERATOR_VERSION, _discrete_signature,
                                  _draw_identity, make_identities, render_face)

__all__ = ["IDENTITY_STREAM", "IMAGE_STREAM", "PREFIX", "excluded_identities",
           "generate_pretraining_population", "make_pretraining_identities",
           "min_signature_distance", "signature_distances"]

#: RNG streams of the pretraining identities and images (synthfaces uses 1 and 2, the dog
#: breeds 11 and 12): a pretraining population never shares a draw with a target population
IDENTITY_STREAM = 21
IMAGE_STREAM = 22
PREFIX = "pre"


def excluded_identities(populations: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every identity of the private and public pools of ``populations``: mappings with
    ``seed``, ``n_private_identities`` and ``n_public_identities`` (a face dataset's
    ``synthetic`` block of the config)."""
    out: list[dict[str, Any]] = []
    for pop in populations:
        seed = int(pop.get("seed", DEFAULTS["seed"]))
        for pool, key in (("private", "n_private_identities"), ("public", "n_public_identities")):
            n = int(pop.get(key, DEFAULTS[key]))
            out += [dict(i, population_seed=seed) for i in make_identities(n, pool, seed)]
    return out


class _Codes:
    """Discrete signatures as integer rows (one code per distinct value and position), so a
    candidate's Hamming distance to thousands of identities is one vectorised comparison."""

    def __init__(self) -> None:
        self.values: list[dict[Any, int]] = []

    def encode(self, signature: Sequence[Any]) -> np.ndarray:
        if not self.values:
            self.values = [{} for _ in signature]
        return np.array([table.setdefault(v, len(table))
                         for table, v in zip(self.values, signature)], dtype=np.int32)


def signature_distances(ident: Mapping[str, Any], others: Sequence[Mapping[str, Any]]
                        ) -> np.ndarray:
    """Hamming distances between the discrete signature of ``ident`` and those of ``others``."""
    codes = _Codes()
    own = codes.encode(_discrete_signature(dict(ident)))
    if not others:
        return np.zeros(0, dtype=int)
    rows = np.stack([codes.encode(_discrete_signature(dict(o))) for o in others])
    return (rows != own).sum(axis=1)


def min_signature_distance(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]
                           ) -> int:
    """The smallest discrete-signature Hamming distance between an identity of ``a`` and one of
    ``b`` (pairs of the same identity object excluded when ``a is b``)."""
    best = len(_discrete_signature(dict(a[0]))) if a else 0
    for i, ident in enumerate(a):
        others = b[i + 1:] if a is b else b
        if others:
            best = min(best, int(signature_distances(ident, others).min()))
    return best


def make_pretraining_identities(n: int, seed: int,
                                exclude: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The first ``n`` pretraining identities of ``seed``: each differs from every earlier one
    and from every identity of ``exclude`` in at least ``MIN_DISCRETE_DIFF`` discrete
    attributes (module docstring)."""
    if int(n) < 1:
        raise ValueError(f"the pretraining population needs at least one identity, got {n}")
    codes = _Codes()
    width = len(_discrete_signature(_draw_identity(_rng(seed, IDENTITY_STREAM, 0, 0))))
    rows = np.zeros((len(exclude) + int(n), width), dtype=np.int32)  # signatures taken so far
    for i, e in enumerate(exclude):
        rows[i] = codes.encode(_discrete_signature(dict(e)))
    filled = len(exclude)
    out: list[dict[str, Any]] = []
    for k in range(int(n)):
        for attempt in range(10_000):
            item = _draw_identity(_rng(seed, IDENTITY_STREAM, k, attempt))
            code = codes.encode(_discrete_signature(item))
            if filled == 0 or int((rows[:filled] != code).sum(axis=1).min()) >= MIN_DISCRETE_DIFF:
                break
        else:  # pragma: no cover - practically unreachable
            raise RuntimeError("could not draw a distinct pretraining identity")
        out.append({"name": f"{PREFIX}_{k:04d}", "pool": "pretrain", "index": k,
                    "attempt": attempt, **item})
        rows[filled] = code
        filled += 1
    return out


def _render(ident: Mapping[str, Any], j: int, *, seed: int, resolution: int, nuisance: float):
    return render_face(dict(ident), _rng(seed, IMAGE_STREAM, int(ident["index"]), j),
                       resolution=resolution, nuisance=nuisance)


def generate_pretraining_population(
    out_dir: str | os.PathLike[str], *, identities: int, images_per_identity: int,
    val_images_per_identity: int, resolution: int, seed: int,
    exclude_populations: Sequence[Mapping[str, Any]] = (),
    nuisance: float = DEFAULTS["nuisance"], progress: bool = True,
) -> dict:
    """Render the pretraining population into ``out_dir`` (module docstring). ``out_dir`` must
    not exist or be empty. Returns the dataset's meta (with the smallest signature distance to
    the excluded identities, ``min_distance_to_excluded``)."""
    from atat.base.progress import track

    for name, v in (("identities", identities), ("images_per_identity", images_per_identity),
                    ("val_images_per_identity", val_images_per_identity)):
        if int(v) < 1:
            raise ValueError(f"pretraining.population.{name} must be >= 1, got {v}")
    if int(resolution) < 8:
        raise ValueError(f"pretraining.population.resolution must be >= 8, got {resolution}")
    out = Path(out_dir)
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not empty")
    excluded = excluded_identities(exclude_populations)
    idents = make_pretraining_identities(int(identities), int(seed), excluded)
    min_excluded = min_signature_distance(idents, excluded) if excluded else None
    if min_excluded is not None and min_excluded < MIN_DISCRETE_DIFF:  # pragma: no cover
        raise AssertionError(f"pretraining identity within {min_excluded} attributes of an "
                             "excluded one")
    n_train, n_val = int(images_per_identity), int(val_images_per_identity)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        rows = []
        for label, ident in enumerate(track(idents, "pretraining population: identities done",
                                            enabled=progress)):
            (tmp / "images" / ident["name"]).mkdir(parents=True)
            for j in range(n_train + n_val):
                img = _render(ident, j, seed=int(seed), resolution=int(resolution),
                              nuisance=float(nuisance))
                rel = f"images/{ident['name']}/{j:04d}.png"
                img.save(tmp / rel, format="PNG", optimize=False, compress_level=6)
                rows.append((rel, label, ident["name"], "train" if j < n_train else "val"))
        (tmp / "identities.json").write_text(json.dumps(idents, indent=1, sort_keys=True) + "\n")
        params = {"identities": int(identities), "images_per_identity": n_train,
                  "val_images_per_identity": n_val, "resolution": int(resolution),
                  "seed": int(seed), "nuisance": float(nuisance),
                  "exclude_populations": [dict(p) for p in exclude_populations]}
        meta = write_dataset(tmp, pd.DataFrame(rows, columns=["path", "label", "identity",
                                                              "split"]), {
            "name": "synthfaces_pretraining",
            "class_names": [i["name"] for i in idents],
            "resolution": [int(resolution), int(resolution)],
            "split_seed": int(seed),
            "source": (f"synthfaces v{GENERATOR_VERSION}: procedurally rendered pretraining "
                       "identities (atat.data.pretraining), no downloads"),
            "pool": "pretrain",
            "generator": {"name": "synthfaces_pretraining", "version": GENERATOR_VERSION,
                          **params},
            "identities_file": "identities.json",
            "excluded_identities": len(excluded),
            "min_distance_to_excluded": min_excluded,
        })
        install_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta
