"""AutoAttack of one trained model at one epsilon on the configured validation examples
(paper §4, App. F.3; spec §5): inputs in [0, 1], normalisation folded into the model.

Also the precision benchmark (issue 13 item 18): :func:`compare_precisions` measures Table 14's
cells (robust accuracy at each ε for one model) under both ``autoattack.precision`` settings,
fp32 (TF32 off) and tf32 (PyTorch's defaults, as the authors' code ran). TF32 exists only on
CUDA GPUs of compute capability ≥ 8, so on CPU (or older GPUs) the two columns are identical by
construction and every row says ``tf32_active: false``; only a GPU run measures the effect.
Script: ``workflow/scripts/bench_gpu_precision.py``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from atat import io
from atat.config import eps_tag
from atat.data.loading import make_loader
from atat.precision import DEFAULT_PRECISION, PRECISIONS, check_precision, tf32_active
from atat.robustness import NormalizedModel, evaluate_autoattack
from atat.train import load_model

log = logging.getLogger(__name__)


def first_examples(dataset_root: str | Path, split: str, n: int, resolution: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n`` examples of a split, un-normalised in [0, 1], in manifest order."""
    loader = make_loader(dataset_root, split, resolution=resolution, batch_size=min(n, 256),
                         train=False, normalize=False)
    xs, ys, got = [], [], 0
    for x, y in loader:
        xs.append(x)
        ys.append(y)
        got += len(y)
        if got >= n:
            break
    x, y = torch.cat(xs)[:n], torch.cat(ys)[:n]
    if len(y) < n:
        log.warning("split '%s' has only %d examples; AutoAttack runs on all of them (asked %d)",
                    split, len(y), n)
    return x, y


def _attacked_model(model_path: str | Path, device: str) -> tuple[NormalizedModel, dict]:
    """The trained model as AutoAttack sees it: [0, 1] inputs → logits through the defense's
    inference path, eval mode."""
    model, defense, ckpt = load_model(model_path, device)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return defense.logits(self.inner, x)

    return NormalizedModel(Logits()).eval(), ckpt


def run_autoattack(*, model_path: str | Path, dataset_root: str | Path, out_path: str | Path,
                   epsilon: float, settings: Mapping[str, Any], resolution: int,
                   device: str = "cpu") -> dict[str, Any]:
    """One (model, ε) job of rule autoattack; ``settings`` is the config's ``autoattack``
    block (``precision`` defaults to fp32). Writes the record (with ``precision`` and
    ``tf32_active``) to ``out_path``."""
    precision = check_precision(settings.get("precision", DEFAULT_PRECISION))
    net, ckpt = _attacked_model(model_path, device)
    x, y = first_examples(dataset_root, settings["split"], settings["n_examples"], resolution)
    result = evaluate_autoattack(
        net, x, y, epsilon=epsilon,
        attacks=tuple(settings["attacks"]), version=settings["version"],
        settings=settings.get("settings") or None, batch_size=settings["batch_size"],
        seed=settings["seed"], device=device, precision=precision)
    result.update(model_id=ckpt["model_id"], split=settings["split"],
                  epsilon_tag=eps_tag(epsilon), model_path=str(model_path))
    io.write_json(out_path, result)
    log.info("%s eps=%s robust accuracy %.4f (clean %.4f, precision %s)", ckpt["model_id"],
             eps_tag(epsilon), result["robust_accuracy"], result["clean_accuracy"], precision)
    return result


# --------------------------------------------------------------------------- precision bench
def _device_name(device: str | torch.device) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"
    return str(device)


def compare_precisions(model: torch.nn.Module, x01: torch.Tensor, y: torch.Tensor, *,
                       epsilons: Sequence[float], attacks: Sequence[str],
                       version: str = "standard", settings: Mapping[str, Any] | None = None,
                       batch_size: int = 128, seed: int = 0, device: str = "cpu",
                       precisions: Sequence[str] = PRECISIONS) -> dict[str, Any]:
    """AutoAttack robust accuracy of ``model`` (see :func:`atat.robustness.evaluate_autoattack`
    for its arguments) at each ε under each precision, same examples and seed. Returns
    ``{"device", "torch_version", "rows": [{epsilon, precision, tf32_active, clean_accuracy,
    robust_accuracy, robust_<attack>, seconds}], "differences": [{epsilon, robust_fp32,
    robust_tf32, tf32_minus_fp32, n_examples_differing, tf32_active}], "note"}``
    (``differences`` only when both fp32 and tf32 ran)."""
    precisions = [check_precision(p, "precisions") for p in precisions]
    rows: list[dict[str, Any]] = []
    flags: dict[tuple[float, str], list[int]] = {}
    for eps in epsilons:
        for precision in precisions:
            rec = evaluate_autoattack(model, x01, y, epsilon=float(eps), attacks=attacks,
                                      version=version, settings=settings,
                                      batch_size=batch_size, seed=seed, device=device,
                                      precision=precision)
            row = {"epsilon": float(eps), "precision": precision,
                   "tf32_active": rec["tf32_active"], "n_examples": rec["n_examples"],
                   "clean_accuracy": rec["clean_accuracy"],
                   "robust_accuracy": rec["robust_accuracy"], "seconds": rec["seconds"]}
            row.update({f"robust_{a}": v["robust_accuracy"] for a, v in rec["per_attack"].items()})
            rows.append(row)
            flags[(float(eps), precision)] = rec["robust_flags"]
            log.info("eps=%g %s: robust %.4f (clean %.4f, tf32 active: %s, %.1f s)", eps,
                     precision, rec["robust_accuracy"], rec["clean_accuracy"],
                     rec["tf32_active"], rec["seconds"])
    differences = []
    if {"fp32", "tf32"} <= set(precisions):
        by = {(r["epsilon"], r["precision"]): r for r in rows}
        for eps in epsilons:
            a, b = by[(float(eps), "fp32")], by[(float(eps), "tf32")]
            fa, fb = flags[(float(eps), "fp32")], flags[(float(eps), "tf32")]
            differences.append({
                "epsilon": float(eps), "robust_fp32": a["robust_accuracy"],
                "robust_tf32": b["robust_accuracy"],
                "tf32_minus_fp32": b["robust_accuracy"] - a["robust_accuracy"],
                "n_examples_differing": sum(int(u != v) for u, v in zip(fa, fb)),
                "tf32_active": b["tf32_active"]})
    active = tf32_active("tf32", device)
    note = ("tf32 ran with cuDNN TF32 convolutions on this GPU: the differences are the "
            "effect of PyTorch's default precision on the measurement" if active else
            "TF32 is not available on this device (CPU or a GPU of compute capability < 8): "
            "fp32 and tf32 compute the same numbers, so any difference would be a bug; run "
            "on an Ampere-or-later GPU to measure the effect")
    return {"device": _device_name(device), "torch_version": torch.__version__,
            "rows": rows, "differences": differences, "note": note}


def precision_benchmark(*, model_path: str | Path, dataset_root: str | Path,
                        settings: Mapping[str, Any], out_path: str | Path,
                        epsilons: Sequence[float] | None = None,
                        n_examples: int | None = None, device: str = "cpu",
                        precisions: Sequence[str] = PRECISIONS) -> dict[str, Any]:
    """:func:`compare_precisions` for a trained model on the first examples of its dataset's
    ``settings['split']`` (``settings``: the config's ``autoattack`` block; ``epsilons`` and
    ``n_examples`` override it), written atomically as JSON to ``out_path``."""
    net, ckpt = _attacked_model(model_path, device)
    n = int(n_examples if n_examples is not None else settings["n_examples"])
    x, y = first_examples(dataset_root, settings["split"], n, int(ckpt["resolution"]))
    eps = [float(e) for e in (epsilons if epsilons is not None else settings["epsilons"])]
    result = compare_precisions(net, x, y, epsilons=eps, attacks=tuple(settings["attacks"]),
                                version=settings["version"],
                                settings=settings.get("settings") or None,
                                batch_size=int(settings["batch_size"]),
                                seed=int(settings["seed"]), device=device,
                                precisions=precisions)
    result.update(model_id=ckpt["model_id"], model_path=str(model_path),
                  split=settings["split"], attacks=list(settings["attacks"]),
                  version=settings["version"])
    io.write_json(out_path, result)
    return result


def _table(result: Mapping[str, Any]) -> str:
    lines = [f"device: {result['device']} (torch {result['torch_version']})",
             f"{'epsilon':>9} {'fp32':>8} {'tf32':>8} {'tf32-fp32':>10} {'differing':>9}"]
    for d in result["differences"]:
        lines.append(f"{d['epsilon']:>9g} {d['robust_fp32']:>8.4f} {d['robust_tf32']:>8.4f} "
                     f"{d['tf32_minus_fp32']:>+10.4f} {d['n_examples_differing']:>9d}")
    lines.append(result["note"])
    return "\n".join(lines)


def precision_benchmark_main(argv: Sequence[str] | None = None) -> int:
    """CLI of ``workflow/scripts/bench_gpu_precision.py``: Table 14's cells (robust accuracy at
    each ε) of one trained model under fp32 and tf32; prints the comparison, writes JSON."""
    import argparse

    from atat.config import load_config, validate_config

    ap = argparse.ArgumentParser(
        prog="bench_gpu_precision.py",
        description="AutoAttack robust accuracy of one model at each epsilon under "
                    "autoattack.precision fp32 (TF32 off) and tf32 (PyTorch's defaults, as "
                    "the authors' code ran). Meaningful on a CUDA GPU with TF32 (compute "
                    "capability >= 8); on CPU both columns are identical (TF32 does not exist).")
    ap.add_argument("--model", required=True, help="a trained model.pt (rule train_model)")
    ap.add_argument("--dataset-root", required=True,
                    help="its dataset's private root, e.g. results/datasets/facescrub/private")
    ap.add_argument("--config", nargs="+", default=["config/config.yaml"],
                    help="config file(s), later ones overlay earlier ones; its autoattack "
                         "block gives attacks, version, settings, split, batch size, seed")
    ap.add_argument("--epsilons", type=float, nargs="+", default=None,
                    help="default: autoattack.epsilons (Table 14 alone: 1e-5)")
    ap.add_argument("--n-examples", type=int, default=None,
                    help="default: autoattack.n_examples")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="results/bench/precision.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfg = load_config(*args.config)
    validate_config(cfg)
    result = precision_benchmark(model_path=args.model, dataset_root=args.dataset_root,
                                 settings=cfg["autoattack"], out_path=args.out,
                                 epsilons=args.epsilons, n_examples=args.n_examples,
                                 device=args.device)
    print(_table(result))
    print(f"written: {args.out}")
    return 0
