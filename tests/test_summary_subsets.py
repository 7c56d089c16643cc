"""Per-output summaries (issue 43 item 5): each table and figure read from its own summary
(atat.analysis.paper.summary_selection: only the records it reads) is byte for byte the one read
from the whole grid's results/summary.csv -- the same tables from the same records."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest
import yaml

from atat.analysis import figures, paper, tables
from atat.plan.config import load_config, model_runs
from atat.analysis.dose_response import dose_response
from atat.analysis.preconditions import check_preconditions
from atat.analysis.stats.regression import causal_sample
from atat.analysis.summary import INVERSION_METRICS, build_summary, record_models

ROOT = Path(__file__).resolve().parents[1]
AA_ATTACKS = ["apgd-ce", "apgd-t", "fab-t", "square"]
#: results/summary.csv of a measured demo run (tests/test_tables.py: DEMO_SUMMARY)
DEMO_SUMMARY = ROOT / "tests" / "data" / "demo_summary.csv"


def _plan() -> paper.Plan:
    # the demo with its dog breeds (the overlay since 2026-12-06): the measured run's models,
    # and Table 26's path (no δ_face on dogs) stays covered
    config = load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml",
                         ROOT / "config" / "overlays" / "demo-dogs.yaml")
    regressions = yaml.safe_load((ROOT / "config" / "regressions.yaml").read_text())
    return paper.Plan(config, model_runs(config), regressions)


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _fabricate_records(plan: paper.Plan, work: Path) -> list[paper.RunRecords]:
    """Every record of every model, as the workflow lays them out under ``work``: the numbers
    of the demo's measured run (tests/data/demo_summary.csv, with its missing values) where it
    has the model, else seeded random ones; returns the records of the whole grid (what rule
    summary reads)."""
    rng = random.Random(43)
    demo = pd.read_csv(DEMO_SUMMARY)
    measured = {(r.dataset, r.architecture, r.defense, int(r.seed)): r._asdict()
                for r in demo.itertuples(index=False)}

    def value(row, col, fallback):
        v = row.get(col) if row else None
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None if row and col in row else fallback
        return v.item() if hasattr(v, "item") else v

    every = paper._records(plan, plan.runs, epsilons=plan.epsilons, attacks="all")
    for m in record_models(every, plan.config):
        row = measured.get((m["dataset"], m["architecture"], m["defense"], int(m["seed"])))
        _write(work / m["metrics"], {k: value(row, k, f()) for k, f in [
            # test accuracy a count over the demo run's 60 test images, as training writes
            ("test_acc", lambda: rng.randint(0, 60) / 60), ("n_test", lambda: 60),
            ("test_top5", rng.random), ("val_acc", rng.random),
            ("best_epoch", lambda: rng.randint(1, 9)), ("train_seconds", rng.random),
            ("pretrained", lambda: False), ("train_acc", rng.random),
            ("kept_pixel_fraction", lambda: rng.random() if "unseen" in m["defense"] else None)]})
        for tag, path in m["robustness"].items():
            # counts out of the 64 attacked images, as the AutoAttack job writes
            per = {a: {"robust_accuracy": value(row, f"robust_acc_eps{tag}_{a}",
                                                rng.randint(0, 64) / 64)} for a in AA_ATTACKS}
            _write(work / path, dict(
                epsilon=float(tag), per_attack=per,
                clean_accuracy=value(row, f"aa_clean_acc_eps{tag}", rng.randint(0, 64) / 64),
                robust_accuracy=value(row, f"robust_acc_eps{tag}",
                                      min(v["robust_accuracy"] for v in per.values())),
                n_examples=value(row, f"aa_n_examples_eps{tag}", 64),
                precision=value(row, f"aa_precision_eps{tag}", "fp32")))
        for attack, path in m["inversion"].items():
            s = {k: value(row, f"{attack}_{k}", rng.randint(0, 20) / 20 if k.startswith("attacc")
                          else rng.random())  # AttAcc: counts out of 20 images
                 for k in INVERSION_METRICS}
            _write(work / path, dict(summary={**s, "n_images": value(row, f"{attack}_n_images",
                                                                        20)}))
    return every


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    """(plan, work dir, the full summary, entry id -> its own summary)."""
    work = tmp_path_factory.mktemp("records")
    plan = _plan()
    every = _fabricate_records(plan, work)
    attacks = paper.summary_attacks(plan)

    def build(records, name):
        models = record_models(records, plan.config)
        for m in models:  # the records under `work`
            m["metrics"] = str(work / m["metrics"])
            m["robustness"] = {k: str(work / v) for k, v in m["robustness"].items()}
            m["inversion"] = {k: str(work / v) for k, v in m["inversion"].items()}
        out = work / "summaries" / f"{name}.csv"
        out.parent.mkdir(exist_ok=True)
        build_summary(models, out, attacks=attacks)
        return out

    full = build(every, "full")
    own = {e: build(paper.summary_selection(plan, e), e) for e in paper.SUMMARY_SELECTIONS
           if paper.output(e).targets(plan)}
    return plan, work, full, own


def _same_files(make, work: Path, full: Path, own: Path, names) -> None:
    a = [work / "a" / n for n in names]
    b = [work / "b" / n for n in names]
    for p in a + b:
        p.parent.mkdir(parents=True, exist_ok=True)
    make(full, a)
    make(own, b)
    for x, y in zip(a, b):
        assert x.read_bytes() == y.read_bytes(), y.name


def _table_files(name):
    return [f"{name}.{e}" for e in paper.EXTS]


def test_the_subsets_are_smaller_and_the_full_grid_is_every_record(summaries):
    """The check can fail: a per-output summary is a real subset (fewer rows or columns)."""
    plan, _, full, own = summaries
    n_full = pd.read_csv(full).shape
    assert n_full[0] == len(plan.runs)
    for e in ("table2", "table4", "table11"):
        shape = pd.read_csv(own[e]).shape
        assert shape[0] < n_full[0] or shape[1] < n_full[1], e


def test_tables_2_3_4_from_their_summaries(summaries):
    plan, work, full, own = summaries
    c = plan.config
    _same_files(lambda s, out: tables.table2(s, out, permuted=paper.permuted_defenses(c),
                                             true_labels=paper.plain_nodef_defenses(c)),
                work / "t2", full, own["table2"], _table_files("table2"))
    _same_files(lambda s, out: tables.table3(s, out, roles=paper.section3_roles(c)),
                work / "t3", full, own["table3"], _table_files("table3"))
    _same_files(lambda s, out: tables.table4(s, out, architecture=paper.table4_architecture(plan),
                                             epsilons=plan.epsilons),
                work / "t4", full, own["table4"], _table_files("table4"))


def test_autoattack_tables_and_figure_from_their_summaries(summaries):
    plan, work, full, own = summaries
    eps_of = paper.robustness_table_eps(plan.config)
    assert eps_of, "the demo tabulates an epsilon of Tables 11-14"
    for number, eps in eps_of.items():
        name = f"table{number}"
        _same_files(lambda s, out, eps=eps: tables.robustness_table(s, out, eps=eps),
                    work / name, full, own[name], _table_files(name))
    _same_files(lambda s, out: figures.robust_accuracy_vs_epsilon(s, out[0],
                                                                  epsilons=plan.epsilons),
                work / "fr", full, own["figure_robustness"], ["figure.png"])


def test_hsic_tables_from_their_summaries(summaries):
    plan, work, full, own = summaries
    rng = random.Random(1)
    built = [t for t in ("table1", "table8", "table9") if t in own]
    assert built
    for t in built:
        runs, note = paper.hsic_table_runs(plan, t)
        files = []
        for r in runs:
            f = work / paper.hsic_file(r)
            layers = ["layer1", "layer2"]
            _write(f, dict(dataset=r.dataset, architecture=r.architecture, defense_name=r.defense,
                           seed=r.seed, layers=layers, n_batches=2,
                           hsic_xz={k: rng.random() for k in layers},
                           hsic_yz={k: rng.random() for k in layers}))
            files.append(f)
        _same_files(lambda s, out, t=t, files=files, note=note: tables.hsic_table(
            files, s, out, table=t, note=note), work / t, full, own[t], _table_files(t))


def test_preconditions_main_results_and_figure4_from_their_own_inputs(summaries):
    plan, work, full, own = summaries

    def frame(make, s):
        return make(pd.read_csv(s)).to_csv(index=False)

    pre = lambda s: check_preconditions(s, {}, plan.config, None)  # noqa: E731
    assert frame(pre, full) == frame(pre, own["preconditions"])
    # ... with the claims cell NoDef's PPA record (the attack regime) and every NoDef's AutoAttack
    experiments = set(pre(pd.read_csv(own["preconditions"]))["experiment"])
    assert {"attack regime", "AutoAttack regime", "determinism"} <= experiments
    # Tables 23-28: the grid's per-image table (rule inversion_per_image: every grid model's
    # attacks, in order) vs the table's own rows (rule output_per_image), with their summaries
    rng = random.Random(7)
    per_file = {}
    for r in paper.grid_runs(plan):
        for a in paper.run_attacks(plan.config, r):
            per_file[f"results/inversion/{r.path}/{a}/per_image.csv"] = pd.DataFrame([dict(
                dataset=r.dataset, architecture=r.architecture, defense=r.defense, seed=r.seed,
                attack=a, **{"class": k}, correct_top1=rng.randint(0, 1), correct_top5=1,
                evalconf=rng.random(), dist_face=None if "dogs" in r.dataset else rng.random(),
                dist_eval=rng.random()) for k in range(3) for _ in range(2)])
    every = pd.concat(list(per_file.values()), ignore_index=True)
    built = [t for t in paper.MAIN_TABLE_IDS if f"table{t}" in own]
    assert built
    for t in built:
        files = paper.per_image_selection(plan, f"table{t}")
        assert 0 < len(files) < len(per_file), t
        mine = pd.concat([per_file[f] for f in files], ignore_index=True)
        names = _table_files(f"table{t}")
        a, b = work / f"mr{t}" / "a", work / f"mr{t}" / "b"
        a.mkdir(parents=True)
        b.mkdir(parents=True)
        # through CSV, as the rules hand them over
        every.to_csv(a / "per_image.csv", index=False)
        mine.to_csv(b / "per_image.csv", index=False)
        tables.main_results_table(pd.read_csv(a / "per_image.csv"), pd.read_csv(full),
                                  [a / n for n in names], number=int(t), config=plan.config)
        tables.main_results_table(pd.read_csv(b / "per_image.csv"),
                                  pd.read_csv(own[f"table{t}"]), [b / n for n in names],
                                  number=int(t), config=plan.config)
        for n in names:
            assert (a / n).read_bytes() == (b / n).read_bytes(), n
    # Figure 4: the grid's summary and per-image table vs its own (its points' models)
    files = paper.per_image_selection(plan, "figure4")
    assert 0 < len(files) < len(per_file)
    mine = pd.concat([per_file[f] for f in files], ignore_index=True)
    per_image_of = {full: every, own["figure4"]: mine}
    _same_files(lambda s, out: figures.accuracy_vs_privacy(
        pd.read_csv(s), out[0], attacks=plan.attacks, metrics=INVERSION_METRICS,
        architecture=paper.main_architecture(plan.config), per_image=per_image_of[s]),
        work / "f4", full, own["figure4"], ["figure4.png"])


def test_causal_tables_and_dose_response_from_their_summaries(summaries):
    plan, work, full, own = summaries
    c = plan.regressions.get("causal") or {}
    names = [*(f"table21.{e}" for e in paper.EXTS), *(f"table22.{e}" for e in paper.EXTS)]
    _same_files(lambda s, out: tables.causal_tables(
        s, out[:3], out[3:], sample=causal_sample(plan.config["causal"]),
        treatment=c.get("treatment", "treatment"),
        beta_responses=c.get("beta_responses", ["ppa_attacc1"]),
        ols_responses=c.get("ols_responses", ["ppa_attacc1", "ppa_dist_face"])),
        work / "causal", full, own["table21_22"], names)
    sweep = plan.config["dose_response"]
    points = [dict(weight_adv=p.weight_adv, defense=p.defense, generated=p.generated)
              for p in paper.dose_response_points(plan.config)]
    _same_files(lambda s, out: dose_response(
        s, out, points=points, dataset=sweep["dataset"], architecture=sweep["architecture"],
        attack=sweep["attack"], epsilons=plan.epsilons, zero=sweep.get("zero")),
        work / "dose", full, own["dose_response"],
        ["dose_response.csv", "dose_response.md", "dose_response.png"])
