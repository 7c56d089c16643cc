"""results/summary.csv: one tidy row per trained model (dataset, architecture, defense, seed,
clean accuracies, worst-case and per-attack robust accuracy per epsilon, each attack's
inversion metrics).

**Rescaled AttAcc@1** (the whole grid's summary, given the evaluation models' metrics): AttAcc@1
read between what an attack scores without any identity information and what the judge can
score at all, ``{attack}_attacc1_rescaled = (x - floor) / (ceiling - floor)``. The ceiling
(``eval_heldout_acc``) is the evaluation model's accuracy on the dataset's private test images
it never trained on: a reconstruction as good as a real unseen image scores about this. The
floor (``{attack}_attacc1_floor``, its kind in ``{attack}_attacc1_floor_source``) is the same
attack's AttAcc@1 on the permuted-label model of the same cell (the same seed where there is
one, else the mean of the cell's; its training labels carry no identity, paper §3), else
chance, 1 / n_classes. 0: no more than the floor; 1: real images' level; NaN where the ceiling is
not above the floor. An extra column: AttAcc@1 itself is unchanged and is what every table,
regression and claim reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from atat.base import io
from atat.plan.config import eps_tag

#: Per attack, the summary columns ``{attack}_{metric}`` (paper §2 metrics;
#: docs/sources.md#attack-accuracy-and-confidence).
INVERSION_METRICS = ["attacc1", "attacc5", "evalconf", "dist_face", "dist_eval"]

ID_COLUMNS = ["dataset", "architecture", "defense", "defense_type", "seed"]


def robust_column(eps: float, attack: str | None = None) -> str:
    return f"robust_acc_eps{eps_tag(eps)}" + (f"_{attack}" if attack else "")


def summary_row(model: Mapping[str, Any]) -> dict[str, Any]:
    metrics = io.read_json(model["metrics"])
    row: dict[str, Any] = {k: model[k] for k in ID_COLUMNS}
    for key in ("replicate", "treatment"):  # causal experiment rows
        row[key] = model.get(key)
    row.update(test_acc=metrics["test_acc"], test_top5=metrics["test_top5"],
               val_acc=metrics["val_acc"], best_epoch=metrics["best_epoch"],
               train_seconds=metrics["train_seconds"], pretrained=metrics["pretrained"],
               train_acc=metrics.get("train_acc"),
               n_test=metrics.get("n_test"),  # test images: the claims' accuracy intervals
               kept_pixel_fraction=metrics.get("kept_pixel_fraction"),
               labels_permuted=metrics.get("labels_permuted"))  # the rescaling's floor
    for eps_text, path in sorted(model.get("robustness", {}).items(), key=lambda kv: -float(kv[0])):
        res = io.read_json(path)
        eps = float(res["epsilon"])
        row[robust_column(eps)] = res["robust_accuracy"]
        for attack, vals in res["per_attack"].items():
            row[robust_column(eps, attack)] = vals["robust_accuracy"]
        row[f"aa_clean_acc_eps{eps_tag(eps)}"] = res["clean_accuracy"]
        row[f"aa_n_examples_eps{eps_tag(eps)}"] = res["n_examples"]
        row[f"aa_precision_eps{eps_tag(eps)}"] = res.get("precision")  # fp32/tf32 (None: older)
    for attack, path in model.get("inversion", {}).items():
        res = io.read_json(path)
        for metric in INVERSION_METRICS:
            value = res["summary"].get(metric)
            row[f"{attack}_{metric}"] = float("nan") if value is None else float(value)
        row[f"{attack}_n_images"] = res["summary"].get("n_images")
    return row


def record_models(records: Iterable[Any], config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The inputs of :func:`build_summary` for ``records`` (:class:`atat.analysis.paper.RunRecords`:
    a model with the AutoAttack epsilons and inversion attacks whose records are read): its
    identity, ``metrics.json`` and those records' files (rule output_summary)."""
    models = []
    for rec in records:
        r = rec.run
        models.append(dict(
            dataset=r.dataset, architecture=r.architecture, defense=r.defense,
            defense_type=config["defenses"][r.defense]["type"], seed=r.seed,
            replicate=r.replicate, treatment=r.treatment,
            metrics=f"results/models/{r.path}/metrics.json",
            robustness={eps_tag(e): f"results/robustness/{r.path}/eps{eps_tag(e)}.json"
                        for e in rec.epsilons},
            inversion={a: f"results/inversion/{r.path}/{a}/metrics.json" for a in rec.attacks}))
    return models


def rescaled_attacc(df: pd.DataFrame, evaluation: Mapping[str, Mapping[str, Any]],
                    attacks: Sequence[str]) -> pd.DataFrame:
    """``df`` with the rescaled AttAcc@1 columns (module docstring) of each of ``attacks``:
    ``eval_heldout_acc``, and per attack ``{attack}_attacc1_floor``, ``_floor_source``,
    ``_rescaled``. ``evaluation``: dataset -> its evaluation model's metrics.json
    (``heldout_acc``, else ``test_acc`` of a record written before it; ``n_classes``)."""
    df = df.copy()

    def ceiling(dataset: str) -> float:
        m = evaluation.get(dataset) or {}
        v = m.get("heldout_acc", m.get("test_acc"))
        return float("nan") if v is None else float(v)

    df["eval_heldout_acc"] = [ceiling(d) for d in df["dataset"]]
    permuted = (df["labels_permuted"].eq(True) if "labels_permuted" in df
                else pd.Series(False, index=df.index))
    for attack in attacks:
        col = f"{attack}_attacc1"
        if col not in df.columns:
            continue
        floors, sources = [], []
        for _, r in df.iterrows():
            cell = df[permuted & (df["dataset"] == r["dataset"])
                      & (df["architecture"] == r["architecture"])][[col, "seed"]].dropna()
            same = cell[cell["seed"] == r["seed"]]
            if len(cell):
                floors.append(float((same if len(same) else cell)[col].mean()))
                sources.append("permuted")
            else:
                n = (evaluation.get(r["dataset"]) or {}).get("n_classes")
                floors.append(1.0 / float(n) if n else float("nan"))
                sources.append("chance")
        df[f"{col}_floor"], df[f"{col}_floor_source"] = floors, sources
        span = df["eval_heldout_acc"] - df[f"{col}_floor"]
        df[f"{col}_rescaled"] = ((df[col] - df[f"{col}_floor"]) / span).where(span > 0)
    return df


def build_summary(models: Iterable[Mapping[str, Any]], out_path: str | Path,
                  attacks: Sequence[str] = (),
                  evaluation: Mapping[str, str | Path] | None = None) -> pd.DataFrame:
    """Write the summary of ``models`` (one row each, :func:`summary_row`). ``attacks``: the
    attacks whose columns the summary has even where no model of ``models`` has their records
    (a summary of some of the models -- one output's, :mod:`atat.analysis.paper` -- then has the
    inversion columns of the whole grid's, which the builders test for). ``evaluation``
    (dataset -> its evaluation model's metrics.json; the whole grid's summary): adds the
    rescaled AttAcc@1 columns (:func:`rescaled_attacc`)."""
    rows = [summary_row(m) for m in models]
    df = pd.DataFrame(rows)
    for attack in attacks:
        for col in [f"{attack}_{m}" for m in INVERSION_METRICS] + [f"{attack}_n_images"]:
            if col not in df.columns:
                df[col] = float("nan")
    if evaluation is not None:
        df = rescaled_attacc(df, {d: io.read_json(p) for d, p in evaluation.items()},
                             [c.removesuffix("_attacc1") for c in df.columns
                              if c.endswith("_attacc1")])
    for col in df.columns:
        if col.startswith(("robust_acc", "test_acc", "val_acc", "test_top5")) or col.endswith(
                ("_attacc1", "_attacc5", "_evalconf")):
            bad = df[col].dropna()
            if not bad.between(0, 1).all():
                raise ValueError(f"summary column {col} has values outside [0, 1]")
    with io.atomic_path(out_path) as tmp:
        df.to_csv(tmp, index=False)
    return df
