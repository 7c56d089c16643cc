"""The pre-registered recipe rule of the miniature's pretraining (docs/decisions.md#pretraining),
run on NoDef alone:

    python -m atat.lab.recipe --configfile config/config.yaml config/demo.yaml \
        --work /tmp/recipe [--out docs/recipe-log.csv] [--arch resnet18] \
        [--pretrain-epochs 4 8] [--lrs 1e-3 3e-4 1e-4] [--finetune-epochs 10]

In ``--work`` it renders the main cell's dataset (from the config's ``synthetic`` block) and the
pretraining population (``pretraining.population``), pretrains the architecture's backbone once
per candidate number of pretraining epochs (:func:`atat.training.pretrain.pretrain_backbone`,
milestone at 75%) and fine-tunes the cell's NoDef from it once per candidate learning rate and
number of fine-tuning epochs (milestones at 75% / 90%) through the workflow's training
(:func:`atat.training.train.train`). Every other setting is the config's. It writes one row per
recipe -- NoDef's training (un-augmented), validation and test accuracy, the pretraining's
held-out accuracy, CPU seconds of each step -- and marks the recipe the rule chooses: the
highest validation accuracy among the recipes with training accuracy >= ``--min-train-acc``
(0.99); ties -> fewer pretraining epochs, then fewer fine-tuning epochs, then the larger
learning rate; none eligible -> the highest training accuracy. The test accuracy is recorded,
never used. Nothing here trains a defense or reads a privacy outcome. A lab tool: the workflow
never imports it.
"""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

#: the pre-registered candidates (docs/decisions.md#the-recipe-rule)
PRETRAIN_EPOCHS = (4, 8)
LEARNING_RATES = (1e-3, 3e-4, 1e-4)
FINETUNE_EPOCHS = (10,)
MIN_TRAIN_ACC = 0.99


def milestones(epochs: int, points: Sequence[float]) -> list[int]:
    """MultiStepLR milestones at the fractions ``points`` of ``epochs`` (floored, distinct,
    below ``epochs``): 10 -> [7, 9] at (0.75, 0.9), 8 -> [6] at (0.75,)."""
    out = sorted({int(math.floor(p * epochs)) for p in points})
    return [m for m in out if 0 < m < epochs]


def choose(rows: pd.DataFrame, min_train_acc: float = MIN_TRAIN_ACC,
           criterion: str = "val_acc") -> int:
    """Index of the recipe the rule picks (module docstring); ``criterion`` ``fewest_epochs``
    (the rule's part for the other architectures): the fewest fine-tuning epochs among the
    eligible recipes, ties -> the higher validation accuracy."""
    eligible = rows[rows["nodef_train_acc"] >= min_train_acc]
    if len(eligible) and criterion == "fewest_epochs":
        order = eligible.sort_values(["finetune_epochs", "nodef_val_acc", "pretrain_epochs", "lr"],
                                     ascending=[True, False, True, False], kind="stable")
    elif len(eligible):
        order = eligible.sort_values(["nodef_val_acc", "pretrain_epochs", "finetune_epochs", "lr"],
                                     ascending=[False, True, True, False], kind="stable")
    else:
        order = rows.sort_values(["nodef_train_acc", "nodef_val_acc", "pretrain_epochs", "lr"],
                                 ascending=[False, False, True, False], kind="stable")
    return int(order.index[0])


def _cpu() -> float:
    return time.process_time()


def host() -> str:
    """The host's name and CPU model (for the log's header)."""
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{socket.gethostname()} ({model})"


def run(config: Mapping[str, Any], work: Path, *, dataset: str, architecture: str,
        pretrain_epochs: Sequence[int], lrs: Sequence[float], finetune_epochs: Sequence[int],
        seed: int = 0, min_train_acc: float = MIN_TRAIN_ACC, criterion: str = "val_acc",
        progress: bool = False) -> pd.DataFrame:
    """Every candidate recipe of the rule on ``dataset`` / ``architecture`` NoDef; one row each."""
    from atat.data.pretraining import generate_pretraining_population
    from atat.data.synthfaces import generate_synthfaces
    from atat.plan.config import (defense_params, n_classes, pretraining_exclusions,
                                  training_params)
    from atat.training.pretrain import pretrain_backbone
    from atat.training.train import TrainSpec, train

    ds = config["datasets"][dataset]
    res = int(ds["resolution"])
    data_root = work / "datasets" / dataset
    if not (data_root / "private" / "meta.json").exists():
        generate_synthfaces(data_root, resolution=res, split_seed=int(config["split_seed"]),
                            progress=progress, **ds["synthetic"])
    pre = config["pretraining"]
    population = work / "pretraining" / "population"
    t = _cpu()
    if not (population / "meta.json").exists():
        generate_pretraining_population(population, exclude_populations=pretraining_exclusions(
            config), progress=progress, **pre["population"])
    population_cpu = _cpu() - t
    rows = []
    for p_epochs in pretrain_epochs:
        recipe = {**pre["training"], **((pre.get("backbones") or {}).get(architecture) or {}),
                  "epochs": int(p_epochs), "lr_milestones": milestones(int(p_epochs), (0.75,))}
        weights = work / "pretrained" / f"{architecture}_{res}px_e{p_epochs}" / "weights.pth"
        t = _cpu()
        pm = pretrain_backbone(population, out_weights=weights,
                               out_metrics=weights.with_name("metrics.json"),
                               architecture=architecture, resolution=res, training=recipe,
                               augmentation=config["augmentation"], seed=int(pre["seed"]),
                               resume_path=weights.with_name("resume.pt"), progress=progress)
        assert pm is not None
        pretrain_cpu = _cpu() - t
        for f_epochs in finetune_epochs:
            for lr in lrs:
                training = {**training_params(config, dataset, architecture, "nodef"),
                            "pretrained": True, "lr": float(lr), "epochs": int(f_epochs),
                            "lr_milestones": milestones(int(f_epochs), (0.75, 0.9))}
                name = f"{dataset}/{architecture}/nodef/seed{seed}/p{p_epochs}_lr{lr:g}_e{f_epochs}"
                out = work / "models" / name
                spec = TrainSpec(model_id=name, dataset_root=str(data_root / "private"),
                                 resolution=res, n_classes=n_classes(config, dataset),
                                 architecture=architecture,
                                 defense=defense_params(config, "nodef", (dataset, architecture)),
                                 training=training, augmentation=config["augmentation"],
                                 seed=int(seed), weights_path=str(weights))
                t = _cpu()
                m = train(spec, out_model=out / "model.pt", out_metrics=out / "metrics.json",
                          resume_path=out / "resume.pt", progress=progress)
                assert m is not None
                rows.append({
                    "dataset": dataset, "architecture": architecture, "pretrain_epochs": p_epochs,
                    "lr": float(lr), "finetune_epochs": f_epochs,
                    "nodef_train_acc": m["train_acc"], "nodef_val_acc": m["val_acc"],
                    "nodef_test_acc": m["test_acc"], "nodef_best_epoch": m["best_epoch"],
                    "pretrain_val_acc": pm["val_acc"],
                    "population_cpu_s": round(population_cpu, 1),
                    "pretrain_cpu_s": round(pretrain_cpu, 1),
                    "finetune_cpu_s": round(_cpu() - t, 1)})
                population_cpu = 0.0  # counted once
                print(pd.DataFrame(rows[-1:]).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    table["chosen"] = False
    table.loc[choose(table, min_train_acc, criterion), "chosen"] = True
    return table


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m atat.lab.recipe", description=__doc__.split("\n")[0])
    ap.add_argument("--configfile", nargs="+", required=True)
    ap.add_argument("--work", required=True, help="scratch folder (datasets, weights, models)")
    ap.add_argument("--out", help="the log table (CSV; a .md beside it)")
    ap.add_argument("--dataset", help="default: the config's first synthetic face dataset")
    ap.add_argument("--arch", help="default: the main architecture (tables.table4_architecture)")
    ap.add_argument("--pretrain-epochs", type=int, nargs="+", default=list(PRETRAIN_EPOCHS))
    ap.add_argument("--lrs", type=float, nargs="+", default=list(LEARNING_RATES))
    ap.add_argument("--finetune-epochs", type=int, nargs="+", default=list(FINETUNE_EPOCHS))
    ap.add_argument("--min-train-acc", type=float, default=MIN_TRAIN_ACC)
    ap.add_argument("--criterion", choices=["val_acc", "fewest_epochs"], default="val_acc",
                    help="val_acc: the main cell's rule; fewest_epochs: the other "
                         "architectures' (the fewest fine-tuning epochs reaching the threshold)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    import torch

    from atat.plan.config import load_config, main_architecture, validate_config

    torch.set_num_threads(args.threads)
    config = load_config(*args.configfile)
    validate_config(config)
    if not config.get("pretraining"):
        print("the config has no pretraining block", file=sys.stderr)
        return 2
    dataset = args.dataset or next(n for n, d in config["datasets"].items()
                                   if d["source"] == "synthfaces" and d.get("faces"))
    arch = args.arch or main_architecture(config)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    table = run(config, Path(args.work), dataset=dataset, architecture=arch,
                pretrain_epochs=args.pretrain_epochs, lrs=args.lrs,
                finetune_epochs=args.finetune_epochs, min_train_acc=args.min_train_acc,
                criterion=args.criterion)
    header = (f"recipe rule on {dataset}/{arch} NoDef, started {started} on {host()}, "
              f"{args.threads} thread(s); chosen: train acc >= {args.min_train_acc}, "
              + ("highest val acc" if args.criterion == "val_acc" else "fewest epochs"))
    print(header)
    print(table.to_string(index=False))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(out, index=False)
        out.with_suffix(".md").write_text(f"{header}\n\n{table.to_markdown(index=False)}\n")
        print(f"written: {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
