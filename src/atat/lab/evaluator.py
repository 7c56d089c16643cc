"""The pre-registered rule choosing the miniature's evaluation model
(docs/decisions.md#the-evaluation-models-architecture), run on the evaluation model alone:

    python -m atat.lab.evaluator --dataset resources/datasets/synthfaces/private \
        --backbone densenet47=results/pretrained/densenet47/32px/weights.pth \
        --backbone resnet10=results/pretrained/resnet10/32px/weights.pth \
        --configfile config/config.yaml config/demo.yaml --work /tmp/evaluator \
        [--out docs/evaluator-log.csv] [--only 0 2 4 6]

Each candidate (architecture x epochs x learning rate) fine-tunes the pretraining's backbone of
its architecture on the private training split through the workflow's own
:func:`atat.inversion.evaluation.train_evaluation_model` (the config's evaluator recipe
otherwise: augmentation, Adam betas, batch size as the candidate says, lowest-validation-loss
snapshot) and writes one row: training (un-augmented), validation and test accuracy, CPU
seconds. The rule's choice -- the highest validation accuracy; ties within one validation image
go to fewer epochs, then the first architecture listed, then the larger learning rate -- is
marked; the test accuracy is recorded for the precondition, never used to choose. No target
model, attack or defense is built or read. A lab tool: the workflow never imports it.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

#: the pre-registered candidates (docs/decisions.md#the-evaluation-models-architecture)
ARCHITECTURES = ("densenet47", "resnet10")
EPOCHS = (15, 40)
LEARNING_RATES = (1e-3, 3e-4)
BATCH_SIZE = 16


def candidates(architectures: Sequence[str] = ARCHITECTURES) -> list[dict[str, Any]]:
    """The candidates in a fixed order (the ``--only`` indices)."""
    return [{"architecture": a, "epochs": e, "lr": lr,
             "lr_milestones": [round(0.75 * e), round(0.9 * e)]}
            for a, e, lr in itertools.product(architectures, EPOCHS, LEARNING_RATES)]


def choose(rows: pd.DataFrame, n_val: int, architectures: Sequence[str] = ARCHITECTURES
           ) -> int:
    """Index (into ``rows``) of the rule's choice: the highest validation accuracy; candidates
    within one validation image of it tie, and the tie goes to fewer epochs, then the earlier
    architecture of ``architectures``, then the larger learning rate."""
    best = rows["val_acc"].max()
    tied = rows[rows["val_acc"] >= best - 1.0 / n_val - 1e-12].copy()
    tied["_arch"] = tied["architecture"].map({a: i for i, a in enumerate(architectures)})
    tied = tied.sort_values(["epochs", "_arch", "lr"], ascending=[True, True, False],
                            kind="stable")
    return int(tied.index[0])


def _load_recipe(configfiles: Sequence[str]) -> dict[str, Any]:
    from atat.plan.config import load_config

    return load_config(*configfiles)["evaluation_model"]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, help="a private dataset root (train/val/test)")
    ap.add_argument("--backbone", action="append", required=True,
                    help="ARCH=PATH of a pretrained backbone (pretrain_backbone's weights.pth)")
    ap.add_argument("--configfile", nargs="+", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", default=None, help="CSV of the rows (default: WORK/evaluator.csv)")
    ap.add_argument("--only", type=int, nargs="*", default=None)
    ap.add_argument("--resolution", type=int, default=32)
    args = ap.parse_args(argv)

    import torch

    from atat.data.manifest import read_meta
    from atat.inversion.evaluation import train_evaluation_model

    torch.set_num_threads(1)
    backbones = dict(b.split("=", 1) for b in args.backbone)
    ev = _load_recipe(args.configfile)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out) if args.out else work / "evaluator.csv"
    n_classes = int(read_meta(Path(args.dataset))["n_classes"])
    cands = candidates(tuple(backbones))
    rows = []
    for i, c in enumerate(cands):
        if args.only is not None and i not in args.only:
            continue
        training = {**dict(ev["training"]), "epochs": c["epochs"], "lr": c["lr"],
                    "lr_milestones": c["lr_milestones"], "batch_size": BATCH_SIZE,
                    "eval_every": 1}
        tag = f"{c['architecture']}-e{c['epochs']}-lr{c['lr']:g}"
        t0 = time.process_time()
        m = train_evaluation_model(
            args.dataset, out_model=work / f"{tag}.pt", out_metrics=work / f"{tag}.json",
            n_classes=n_classes, resolution=args.resolution, architecture=c["architecture"],
            aux_logits=False, weights_path=backbones[c["architecture"]], training=training,
            augmentation=ev.get("augmentation"), seed=int(ev.get("seed", 42)), progress=False)
        assert m is not None
        rows.append({"index": i, **{k: c[k] for k in ("architecture", "epochs", "lr")},
                     "train_acc": m["train_acc"], "val_acc": m["val_acc"],
                     "test_acc": m["test_acc"], "best_epoch": m["best_epoch"],
                     "n_test": m["n_test"],
                     "cpu_s": round(time.process_time() - t0, 1),
                     "host": f"{socket.gethostname()} {platform.processor() or platform.machine()}",
                     "date": datetime.date.today().isoformat()})
        print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    manifest = pd.read_csv(Path(args.dataset) / "manifest.csv")
    n_val = int((manifest["split"] == "val").sum())
    df["n_val"] = n_val
    if out.exists():
        df = pd.concat([pd.read_csv(out), df], ignore_index=True).drop_duplicates(
            "index", keep="last").sort_values("index").reset_index(drop=True)
    df["chosen"] = False
    if len(df) == len(cands):
        df.loc[choose(df, n_val, tuple(backbones)), "chosen"] = True
    df.to_csv(out, index=False)
    print(df.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
