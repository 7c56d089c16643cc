"""One inversion job: load the target model, the generator prior, the evaluation and face
networks, run the configured attack, and write its outputs atomically (metrics last, so a
job that dies leaves no file Snakemake would accept as complete)."""

from __future__ import annotations

import json
import logging
import math
import platform
import shutil
import time
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
import torch
from torch import nn

from atat.base import io
from atat.base.fetch.verify import sha256sum
from atat.base.precision import DEFAULT_PRECISION, check_precision, tf32_active
from atat.training.train import load_model

from .core import target_classes
from .evaluation import load_evaluation_model, load_face_network
from .metrics import Evaluator, load_real_embeddings, save_real_embeddings, summarize
from .stylegan2 import Discriminator, Generator

log = logging.getLogger(__name__)

ID_COLUMNS = ["dataset", "architecture", "defense", "seed", "attack"]

NOT_A_FACE_DATASET = ("not computed: not a face dataset (paper I.2: δ_eval, the evaluation "
                      "model's feature distance, is the distance metric here)")


class TargetLogits(nn.Module):
    """The attacked model as the attacker queries it: [-1, 1] images → logits, through the
    defense's inference path (e.g. Unseen-Pixels' input mask, MID's bottleneck)."""

    def __init__(self, model: nn.Module, defense: Any):
        super().__init__()
        self.model = model
        self.defense = defense

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.defense.logits(self.model, x)


def _discriminator(path: str | Path) -> Discriminator | None:
    try:
        return Discriminator.from_pickle(path)
    except KeyError:
        log.warning("%s has no discriminator 'D': PPDG's projection runs without its D term",
                    path)
        return None




def resume_fingerprint(params: Mapping[str, Any], files: list[str | Path | None]) -> dict[str, Any]:
    """What the per-batch/per-class resume files depend on: the attack's settings and the
    bytes of every input network (target model, generator, evaluation/face networks)."""
    digests = {str(f): sha256sum(f) for f in files if f is not None and Path(f).is_file()}
    return {"params": json.loads(json.dumps(dict(params), sort_keys=True, default=str)),
            "inputs": digests}


def _digest(path: str | Path | None) -> str | None:
    return sha256sum(path) if path is not None else None


def write_real_embeddings(*, evaluation_path: str | Path, dataset_dir: str | Path,
                          face_path: str | Path | None, faces: bool, out_path: str | Path,
                          device: str = "cpu", face_resolution: int | None = None
                          ) -> dict[str, Any]:
    """The scorer's features of every private training image (evaluation model, and the face
    network on face datasets), made once per dataset and networks for all of its inversion
    jobs (rule ``real_embeddings``); stamped with the networks' sha256."""
    start = time.time()
    evaluation = load_evaluation_model(evaluation_path, device)
    face_net = (load_face_network(face_path, device, face_resolution)
                if (faces and face_path) else None)
    ev = Evaluator(evaluation, face_net, real=Path(dataset_dir) / "private", device=device)
    meta = {"evaluation_sha256": _digest(evaluation_path),
            "face_sha256": _digest(face_path) if face_net is not None else None}
    save_real_embeddings(ev, out_path, **meta)
    n = sum(len(v) for v in ev.real_eval.values())
    log.info("embedded %d private training images of %d classes in %.0f s", n,
             len(ev.real_eval), time.time() - start)
    return {"n_images": n, "n_classes": len(ev.real_eval), **meta}


def _checked_embeddings(path: str | Path, evaluation_path: str | Path,
                        face_path: str | Path | None) -> dict[str, Any]:
    cache = load_real_embeddings(path)
    want = {"evaluation_sha256": _digest(evaluation_path),
            "face_sha256": _digest(face_path) if cache.get("face") is not None else None}
    got = {k: cache.get(k) for k in want}
    if got != want:
        raise ValueError(f"{path} was made with other networks ({got}, these are {want}): "
                         "remake it (rule real_embeddings)")
    return cache


def attack_class_list(attack: str, params: Mapping[str, Any]) -> list[int]:
    """The classes of one inversion job in the order its class ranges count them
    (atat.plan.config.inversion_shards): PPA's and IF-GMI's own order, PPDG's ascending."""
    classes = target_classes(params["targets"], int(params["n_classes"]),
                             params.get("dataset_kind", ""), int(params["seed"]),
                             first_k=(attack == "ifgmi"))
    return sorted(set(classes)) if attack == "ppdg" else classes


def run_inversion(*, attack: str, params: Mapping[str, Any], ids: Mapping[str, Any],
                  model_path: str | Path, generator_path: str | Path,
                  evaluation_path: str | Path, dataset_dir: str | Path,
                  face_path: str | Path | None, faces: bool,
                  perceptual: Mapping[str, Any] | None, out_per_image: str | Path,
                  out_metrics: str | Path, out_images: str | Path, out_latents: str | Path,
                  resume_dir: str | Path | None = None, device: str = "cpu",
                  progress: bool = True, face_resolution: int | None = None,
                  real_embeddings: str | Path | None = None) -> dict[str, Any]:
    """One inversion job over every class: :func:`invert_classes` then
    :func:`merge_inversion`. ``real_embeddings``: a :func:`write_real_embeddings` file of the
    same networks (else the private training images are embedded here)."""
    part = invert_classes(attack=attack, params=params, model_path=model_path,
                          generator_path=generator_path, evaluation_path=evaluation_path,
                          dataset_dir=dataset_dir, face_path=face_path, faces=faces,
                          perceptual=perceptual, resume_dir=resume_dir, device=device,
                          progress=progress, face_resolution=face_resolution,
                          real_embeddings=real_embeddings)
    record = merge_inversion([part], attack=attack, params=params, ids=ids,
                             out_per_image=out_per_image, out_metrics=out_metrics,
                             out_images=out_images, out_latents=out_latents)
    if resume_dir is not None:          # the job is complete: its per-batch progress is spent
        shutil.rmtree(resume_dir, ignore_errors=True)
    return record


def invert_class_range(*, out_part: str | Path, resume_dir: str | Path | None = None,
                       **kwargs: Any) -> dict[str, Any]:
    """One class-range job (rule invert_shard): :func:`invert_classes` written atomically to
    ``out_part`` for :func:`merge_inversion`; its resume state is removed once written."""
    part = invert_classes(resume_dir=resume_dir, **kwargs)
    io.torch_save(part, out_part)
    if resume_dir is not None:
        shutil.rmtree(resume_dir, ignore_errors=True)
    return part


def invert_classes(*, attack: str, params: Mapping[str, Any], model_path: str | Path,
                   generator_path: str | Path, evaluation_path: str | Path,
                   dataset_dir: str | Path, face_path: str | Path | None, faces: bool,
                   perceptual: Mapping[str, Any] | None,
                   class_range: tuple[int, int] | None = None,
                   resume_dir: str | Path | None = None, device: str = "cpu",
                   progress: bool = True, face_resolution: int | None = None,
                   real_embeddings: str | Path | None = None) -> dict[str, Any]:
    """The attack on the classes at positions ``class_range = (start, stop)`` of
    :func:`attack_class_list` (None: every class), each computed exactly as in the job over
    every class (the scorer holds every attacked class's real images either way). Returns
    the attack's part (``ppa_classes`` / ``ifgmi_classes`` / ``ppdg_classes``) with what
    :func:`merge_inversion` records: the model id, the scorer's real-image scale and face
    note, the device, precision and seconds."""
    start = time.time()
    precision = check_precision(params.get("precision", DEFAULT_PRECISION),
                                "inversion.precision")
    model, defense, ckpt = load_model(model_path, device)
    target = TargetLogits(model, defense).eval()
    G = Generator.from_pickle(generator_path).to(device)
    if G.img_channels != 3:
        raise ValueError(f"{generator_path}: the generator makes {G.img_channels}-channel images")
    evaluation = load_evaluation_model(evaluation_path, device)
    if evaluation.n_classes != int(params["n_classes"]):
        raise ValueError(f"{evaluation_path}: evaluation model has {evaluation.n_classes} classes, "
                         f"the dataset {params['n_classes']}")
    face_net = (load_face_network(face_path, device, face_resolution)
                if (faces and face_path) else None)
    classes = attack_class_list(attack, params)
    rng = (0, len(classes)) if class_range is None else tuple(int(v) for v in class_range)
    cache = (_checked_embeddings(real_embeddings, evaluation_path,
                                 face_path if face_net is not None else None)
             if real_embeddings is not None else None)
    scorer = Evaluator(evaluation, face_net, real=Path(dataset_dir) / "private",
                       center_crop=params.get("center_crop"), classes=classes, device=device,
                       face_metric_note=None if faces else NOT_A_FACE_DATASET,
                       real_embeddings=cache)
    log.info("%s on %s: classes %d-%d of %d target classes (precision %s)", attack,
             ckpt["model_id"], rng[0], rng[1], len(classes), precision)
    if resume_dir is not None:
        inputs = [model_path, generator_path, evaluation_path, face_path,
                  *(dict(perceptual or {}).values())]
        stamp = dict(params) if class_range is None else {**params, "class_range": list(rng)}
        if io.prepare_resume_dir(resume_dir, resume_fingerprint(stamp, inputs)):
            log.info("resuming from %s", resume_dir)

    if attack == "ppa":
        from .ppa import ppa_classes

        part = ppa_classes(G, target, params, scorer, class_range=rng, device=device,
                           resume_dir=resume_dir, progress=progress)
    elif attack == "ifgmi":
        from .ifgmi import ifgmi_classes

        part = ifgmi_classes(G, target, params, scorer, class_range=rng, device=device,
                             resume_dir=resume_dir, progress=progress, log=log.info)
    elif attack == "ppdg":
        from .perceptual import build_perceptual
        from .ppdg import ppdg_classes

        perceptual = dict(perceptual or {})
        kind = params["perceptual"]
        if kind == "vgg16_lpips":
            net = build_perceptual(kind, vgg_weights=perceptual["vgg"],
                                   lpips_weights=perceptual["lin"])
        else:
            net = build_perceptual(kind, module=load_face_network(perceptual["embedding"], device))
        part = ppdg_classes(G, _discriminator(generator_path), target, params, scorer,
                            net.to(device), class_range=rng, device=device,
                            resume_dir=resume_dir, progress=progress, log=log.info)
    else:
        raise ValueError(f"unknown inversion attack '{attack}' (known: ppa, ifgmi, ppdg)")
    part.update(model_id=ckpt["model_id"], real_nn=scorer.real_nn_distances(),
                face_metric_note=scorer.face_metric_note, device=str(device),
                precision=precision, tf32_active=tf32_active(precision, device),
                seconds=time.time() - start)
    return part


def merge_inversion(parts: list[Mapping[str, Any]], *, attack: str, params: Mapping[str, Any],
                    ids: Mapping[str, Any], out_per_image: str | Path,
                    out_metrics: str | Path, out_images: str | Path,
                    out_latents: str | Path) -> dict[str, Any]:
    """The outputs of one (model, attack) from :func:`invert_classes` parts whose class ranges
    tile its classes (rule invert): the per-image table, the best image per class, the final
    latents and the record (metrics last), the same bytes for any split into ranges (the
    record's ``seconds``, summed over the parts, aside)."""
    start = time.time()
    if not parts:
        raise ValueError(f"{out_metrics}: no parts to merge")
    model_ids = {p["model_id"] for p in parts}
    if len(model_ids) != 1:
        raise ValueError(f"{out_metrics}: parts of different models {sorted(model_ids)}")
    if attack == "ppa":
        from .ppa import merge_ppa

        result = merge_ppa(list(parts), params)
    elif attack == "ifgmi":
        from .ifgmi import merge_ifgmi

        result = merge_ifgmi(list(parts), params, log=log.info)
    elif attack == "ppdg":
        from .ppdg import merge_ppdg

        result = merge_ppdg(list(parts), params)
    else:
        raise ValueError(f"unknown inversion attack '{attack}' (known: ppa, ifgmi, ppdg)")
    model_id = model_ids.pop()
    first = min(parts, key=lambda p: tuple(p["class_range"]))
    frame: pd.DataFrame = result["frame"]
    summary = {**summarize(frame, first["face_metric_note"]), **first["real_nn"]}
    summary["n_images"] = int(len(frame))
    summary["n_classes_attacked"] = len(attack_class_list(attack, params))
    summary["chance_attacc1"] = 1.0 / int(params["n_classes"])
    if "image_range_note" in summary:
        log.warning("%s %s: %s", attack, model_id, summary["image_range_note"])
    per_image = frame.copy()
    for i, col in enumerate(ID_COLUMNS):
        per_image.insert(i, col, ids[col])
    extras = {k: v for k, v in result.items()
              if k in ("best_stage", "stage_attacc1", "selection_note", "stage_summary",
                       "round_metrics", "avg_target_conf", "note")}
    devices = sorted({str(p["device"]) for p in parts})
    record = {
        **dict(ids), "summary": _finite(summary), "details": _finite(extras),
        "params": dict(params), "model_id": model_id,
        "seconds": sum(float(p["seconds"]) for p in parts) + time.time() - start,
        "device": devices[0] if len(devices) == 1 else devices,
        "precision": first["precision"],
        "tf32_active": any(bool(p["tf32_active"]) for p in parts),
        "torch": torch.__version__, "python": platform.python_version(),
    }
    with io.atomic_path(out_per_image) as tmp:
        per_image.to_csv(tmp, index=False)
    io.torch_save(result["best_images"], out_images)
    io.torch_save({"w": result["final_w"], "targets": result["targets"]}, out_latents)
    io.write_json(out_metrics, record)
    log.info("%s %s: AttAcc@1 %.4f AttAcc@5 %.4f EvalConf %.4f δ_face %s δ_eval %.4f "
             "(real-image nearest-neighbour δ_eval %.4f; chance %.4f, %d images, %d part(s), "
             "%.0f s)", attack, model_id, summary["attacc1"], summary["attacc5"],
             summary["evalconf"], summary["dist_face"], summary["dist_eval"],
             summary.get("dist_eval_real_nn", math.nan), summary["chance_attacc1"],
             len(frame), len(parts), record["seconds"])
    return record


def _finite(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf → None, tensors → lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, torch.Tensor):
        return _finite(obj.tolist())
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def concat_per_image(paths: list[str | Path], out_path: str | Path) -> pd.DataFrame:
    """Concatenate the per-image tables of every inversion job into one long table."""
    frames = [pd.read_csv(p) for p in paths]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    with io.atomic_path(out_path) as tmp:
        df.to_csv(tmp, index=False)
    return df
