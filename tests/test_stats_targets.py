"""Which statistics outputs (Tables 5, 15-20, cost of privacy, Figure 2) the workflow plans
(atat.analysis.paper): a spec counts only when its sample of the PLANNED models -- selected exactly
as the fit selects it -- is large enough to fit it (the statistics sizes); and a
spec that is skipped at run time gives Figure 2 with the reason, not a crash."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from atat.plan.config import ModelRun, load_config, model_runs
from atat.analysis.figures import observed_vs_predicted
from atat.analysis.paper import stats_targets
from atat.analysis.paper import (
    FIGURE2_SPEC,
    TABLE5_SPECS,
    planned_sample_frame,
    spec_identifiable,
)
from atat.analysis.stats.regression import SpecSkipped, fit_spec, select_sample

from atat.analysis.tables import load_specs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_stats_regression import paper_grid_summary  # noqa: E402

REGRESSIONS = ROOT / "config" / "regressions.yaml"
STATS_TABLES = [f"results/tables/table{n}.md" for n in ("5", "15", "16", "17", "18", "19", "20")]
COST = "results/stats/cost_of_privacy.csv"
FIG2 = "results/figures/figure2_observed_vs_predicted.png"


@pytest.fixture(scope="module")
def paper():
    return load_config(ROOT / "config" / "config.yaml")


@pytest.fixture(scope="module")
def regressions():
    import yaml

    return yaml.safe_load(REGRESSIONS.read_text())


@pytest.fixture(scope="module")
def specs():
    return {s["name"]: s for s in load_specs(REGRESSIONS)}


def _runs(frame):
    return [ModelRun(r.dataset, r.architecture, r.defense, int(r.seed))
            for r in frame.itertuples(index=False)]


def test_paper_grid_plans_every_statistics_output(paper, regressions, specs):
    runs = model_runs(paper)
    assert all(spec_identifiable(s, paper, runs) for s in specs.values())
    t = stats_targets(paper, regressions, runs)
    for out in ["results/stats/regressions.csv", *STATS_TABLES, COST, FIG2]:
        assert out in t, out


def test_planned_sample_is_the_fits_sample(paper, specs):
    """The planning frame selects the same models the fit will (variants by name, TL-DMI-5
    on ResNet-18 only, causal replicates out)."""
    frame = planned_sample_frame(paper, model_runs(paper))
    summary = paper_grid_summary()
    for name in ("T15_ppa_generic_joint_ols", "T16_ppa_gradient_joint_ols",
                 "T17_ppa_generic_acc_x_architecture_testacc_slopes_beta"):
        planned, _ = select_sample(frame, specs[name])
        fitted = fit_spec(summary, specs[name])["data"]
        key = ["dataset", "architecture", "defense", "seed"]
        assert sorted(map(tuple, planned[key].to_numpy())) == \
            sorted(map(tuple, fitted[key].to_numpy())), name


def test_models_of_other_variants_do_not_make_a_sample(paper, regressions, specs):
    """Only BiDO** and permuted-label models (types bido / nodef) on the generic datasets
    and architectures: the generic specs have no model, so nothing generic is planned (the
    old check matched dataset and architecture only and planned all of it)."""
    runs = [ModelRun(d, a, f, s) for d in ("facescrub", "celeba")
            for a in ("resnet152", "resnet18") for f in ("bido_lx1e3", "bido_lx1e4", "permuted")
            for s in range(3)]
    generic = [s for s in specs.values() if s["sample_name"] == "generic"]
    assert not any(spec_identifiable(s, paper, runs) for s in generic)
    t = stats_targets(paper, regressions, runs)
    assert not any(x in t for x in [*STATS_TABLES, COST, FIG2, "results/stats/regressions.csv"])


@pytest.mark.parametrize("name", ["T15_ppa_generic_joint_ols", "T15_ppa_generic_joint_beta",
                                  "T15_ppa_generic_eps0.0025_ols",
                                  "T20_ifgmi_generic_acc_x_dataset_testacc_beta",
                                  "T17_ppa_generic_acc_x_architecture_testacc_slopes_ols"])
def test_identifiable_exactly_when_the_fit_has_enough_rows(paper, specs, name):
    """For m = 2 .. 9 models of the spec's sample, planning says "identifiable" exactly when
    fit_spec on those models' summary rows fits rather than skips for size."""
    spec = specs[name]
    summary = paper_grid_summary(seed=2)
    sample, _ = select_sample(summary, spec)
    # alternate datasets/architectures so that a control has both levels early
    order = sample.sort_values(["seed", "defense", "architecture", "dataset"])
    order = order.iloc[sorted(range(len(order)), key=lambda i: (i % 4, i))]
    seen = []
    for m in range(2, 10):
        rows = order.iloc[:m]
        planned = spec_identifiable(spec, paper, _runs(rows))
        try:
            fit_spec(rows, spec)
            fitted = True
        except SpecSkipped as exc:
            fitted = False
            reason = str(exc)
            assert any(r in reason for r in ("too few rows", ">=2 levels",
                                             ">=2 models per level")), reason
        assert planned == fitted, (m, reason if not fitted else "fitted")
        seen.append(planned)
    assert seen[0] is False and seen[-1] is True   # the boundary lies inside the range


def test_few_models_plan_only_what_they_can_fit(paper, regressions, specs):
    """Two models: no regression output at all. Five generic models: Table 15's small
    specs fit (k = 3, 4), Table 5's joint models (k = 5 OLS, 6 Beta) do not -- so no
    Table 5, Figure 2 or cost of privacy."""
    two = [ModelRun("facescrub", "resnet152", "nodef", 0), ModelRun("celeba", "resnet18", "mid", 0)]
    t = stats_targets(paper, regressions, two)
    assert not any(x in t for x in [*STATS_TABLES, COST, FIG2, "results/stats/regressions.csv"])
    five = [ModelRun(d, a, f, 0) for d, a, f in [
        ("facescrub", "resnet152", "nodef"), ("facescrub", "resnet18", "mid"),
        ("celeba", "resnet152", "bido"), ("celeba", "resnet18", "tldmi"),
        ("celeba", "resnet18", "tldmi5")]]
    assert not any(spec_identifiable(specs[n], paper, five) for n in TABLE5_SPECS)
    assert spec_identifiable(specs["T15_ppa_generic_eps0.0025_ols"], paper, five)
    t = stats_targets(paper, regressions, five)
    assert "results/tables/table15.md" in t and "results/tables/table18.md" in t
    assert "results/tables/table17.md" in t        # acc * factor OLS: k = 4
    for x in ("results/tables/table5.md", "results/tables/table16.md",
              "results/tables/table19.md", COST, FIG2):
        assert x not in t, x


def test_figure2_with_a_skipped_spec_says_why(tmp_path, specs):
    """Figure 2 on too few models (or without the response) writes a figure that names the
    spec and the reason and returns it, instead of raising SpecSkipped."""
    spec = specs[FIGURE2_SPEC]
    summary = paper_grid_summary()
    small = select_sample(summary, spec)[0].iloc[:4]
    out = tmp_path / "f2.png"
    info = observed_vs_predicted(small, spec, out)
    assert set(info) == {"skipped"} and "too few rows: n=4" in info["skipped"]
    img = mpimg.imread(out)
    assert img.shape[0] > 300 and img[..., :3].std() > 0.01   # the message is drawn
    info = observed_vs_predicted(summary.drop(columns=["ppa_attacc1"]), spec,
                                 tmp_path / "f2b.png")
    assert "missing columns" in info["skipped"] and "ppa_attacc1" in info["skipped"]
    assert (tmp_path / "f2b.png").stat().st_size > 0
