"""Legibility of the figures (issue 17 item 6): Figure 5 shows correctly classified images and
prefers those that flip, Figure 4's point labels never overlap, the reconstruction grids'
column titles never run into each other, legends stay off the data, fonts >= 8 pt."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.collections
import matplotlib.container
import matplotlib.text
import numpy as np
import pandas as pd
import pytest
import torch

from atat.analysis import figures

from atat.base import io

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

EPS = [0.031, 0.0025, 0.0005, 1e-05]
#: every defense of the demo and the paper grid: the longest labels of atat.analysis.paper
DEFENSES = {"nodef": "nodef", "nodef_es": "nodef", "mid": "mid", "bido": "bido",
            "bido_lx1e3": "bido", "bido_lx1e4": "bido", "tldmi": "tldmi", "tldmi5": "tldmi",
            "negls": "negls", "rolss": "rolss", "rolss_ssf": "rolss_ssf", "trap_mid": "trap_mid",
            "trap_mid_star": "trap_mid", "atat": "atat", "at": "at", "permuted": "nodef",
            "unseen_pixels_gl": "pixel_mask", "unseen_pixels_agl": "pixel_mask",
            "unseen_pixels": "pixel_mask"}

#: what Figure 4 plots of them: NoDef, the seven baselines and AT-AT (each its own model)
FIGURE4 = ["nodef", "mid", "bido", "tldmi", "negls", "rolss", "rolss_ssf", "trap_mid", "atat"]


@pytest.fixture
def saved(monkeypatch):
    """The figures the builders save, kept open for inspection (``_save`` still writes)."""
    figs = []
    real = figures._save

    def keep(fig, out_png, **kw):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        figs.append(fig)
        real(fig, out_png, **kw)
        FigureCanvasAgg(fig)        # plt.close detached its canvas: one to draw on again

    monkeypatch.setattr(figures, "_save", keep)
    return figs


#: the counts the rates of the fabricated summaries are over (test images, AutoAttack's
#: images, attacked images per model)
N_TEST, N_AA, N_IMAGES = 200, 100, 50


def _k_over(x: float, n: int) -> float:
    """``x`` rounded to a count over ``n`` (a rate as the records write it)."""
    return float(np.clip(round(x * n), 0, n)) / n


def crowded_summary(seed: int = 0) -> pd.DataFrame:
    """All 19 defenses of one cell within a few points of each other (the demo's situation:
    the labels of Figure 4 have little room); rates are counts over N_TEST / N_AA /
    N_IMAGES, whose columns the summary records as the real one does."""
    rng = np.random.default_rng(seed)
    rows = []
    for d, dtype in DEFENSES.items():
        r = {"dataset": "synthfaces", "architecture": "resnet18", "defense": d,
             "defense_type": dtype, "seed": 0, "treatment": np.nan,
             "test_acc": _k_over(0.55 + rng.normal(0, 0.02), N_TEST), "n_test": N_TEST}
        for e, level in zip(EPS, (0.0, 0.2, 0.4, 0.55)):
            r[f"robust_acc_eps{e:g}"] = _k_over(level + rng.normal(0, 0.03), N_AA)
            r[f"aa_n_examples_eps{e:g}"] = N_AA
        for a in ("ppa", "ifgmi", "ppdg"):
            r[f"{a}_attacc1"] = _k_over(0.3 + rng.normal(0, 0.03), N_IMAGES)
            r[f"{a}_dist_face"] = 1.0 + rng.normal(0, 0.04)
            r[f"{a}_n_images"] = N_IMAGES
        rows.append(r)
    rows.append({**rows[0], "defense": "tldmi", "defense_type": "tldmi"})   # a coincident point
    return pd.DataFrame(rows)


def per_image_of(summary: pd.DataFrame, n_classes: int = 5, seed: int = 0) -> pd.DataFrame:
    """A per-image table (results/inversion/per_image.csv's columns) for every model and
    attack of ``summary``: N_IMAGES images over ``n_classes`` classes, distances scattered
    around the summary's value."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in summary.drop_duplicates(["dataset", "architecture", "defense", "seed"]).to_dict(
            "records"):
        for a in ("ppa", "ifgmi", "ppdg"):
            if f"{a}_dist_face" not in r or pd.isna(r[f"{a}_dist_face"]):
                continue
            for i in range(N_IMAGES):
                rows.append({"dataset": r["dataset"], "architecture": r["architecture"],
                             "defense": r["defense"], "seed": r["seed"], "attack": a,
                             "class": i % n_classes, "correct_top1": int(i < 10),
                             "correct_top5": 1, "evalconf": 0.5,
                             "dist_face": r[f"{a}_dist_face"] + rng.normal(0, 0.05)})
    return pd.DataFrame(rows)


def _bars(container):
    """(x segments, y segments) of an ErrorbarContainer: per point ((x0, y0), (x1, y1))."""
    cols = [lc.get_segments() for lc in container.lines[2]]
    xs = cols[0] if container.has_xerr else None
    ys = cols[-1] if container.has_yerr else None
    return xs, ys


def _extent(artist, renderer):
    return matplotlib.text.Text.get_window_extent(artist, renderer)


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _small_fonts(fig) -> list[tuple[str, float]]:
    return [(t.get_text(), t.get_fontsize()) for t in fig.findobj(matplotlib.text.Text)
            if t.get_text().strip() and t.get_visible()
            and t.get_fontsize() < figures.MIN_FONT_PT]


# ----------------------------------------------------------------------------- Figure 4

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_figure4_labels_do_not_overlap_each_other_or_the_points(tmp_path, seed):
    summ = crowded_summary(seed)
    fig, n = figures._accuracy_vs_privacy_figure(
        summ, attacks=["ppa", "ifgmi"], metrics=["attacc1", "dist_face"],
        architecture="resnet18", per_image=per_image_of(summ))
    assert n == 4
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        anns = [c for c in ax.get_children() if isinstance(c, matplotlib.text.Annotation)]
        assert len(anns) == len(FIGURE4)                  # every plotted defense labelled once
        boxes = [_extent(a, renderer) for a in anns]
        axbox = ax.get_window_extent(renderer)
        points = [ax.transData.transform(a.xy) for a in anns]
        for i, b in enumerate(boxes):
            assert axbox.x0 <= b.x0 and b.x1 <= axbox.x1 and axbox.y0 <= b.y0 <= b.y1 <= axbox.y1
            assert not any(_overlap(b, o) for o in boxes[i + 1:]), anns[i].get_text()
            assert not any(b.contains(*p) for p in points), anns[i].get_text()
    assert not _small_fonts(fig)


def test_figure4_names_the_attack_and_says_which_way_is_private(tmp_path, saved):
    summ = crowded_summary()
    figures.accuracy_vs_privacy(summ, tmp_path / "f4.png", metrics=["attacc1", "dist_face"],
                                architecture="resnet18", per_image=per_image_of(summ))
    ylabels = [ax.get_ylabel() for ax in saved[0].axes]
    assert "PPA AttAcc@1\n(lower = more private)" in ylabels
    assert "IF-GMI δ_face (squared L2)\n(higher = more private)" in ylabels
    assert {ax.get_title() for ax in saved[0].axes} == {"SynthFaces / ResNet-18"}


def test_figure4_says_which_attack_did_not_run_on_a_cell_instead_of_empty_axes():
    """The demo attacks SynthFaces-B with PPA and IF-GMI only: its PPDG panel is a note, not an
    empty frame with a meaningless axis range."""
    df = crowded_summary()
    other = df.assign(dataset="synthfaces_b", ppdg_attacc1=np.nan)
    df = pd.concat([df.assign(ppdg_attacc1=0.3), other], ignore_index=True)
    fig, n = figures._accuracy_vs_privacy_figure(df, attacks=["ppa", "ppdg"],
                                                 metrics=["attacc1"], architecture="resnet18")
    assert n == 3
    notes = [t.get_text() for ax in fig.axes for t in ax.texts if "not run" in t.get_text()]
    assert notes == ["PPDG not run on\nSynthFaces-B / ResNet-18"]
    assert sum(ax.axison for ax in fig.axes) == 3


def test_figure4_plots_atat_the_seven_baselines_and_nodef_only():
    """§6's comparison: not the §3 experiments (permuted labels, Unseen-Pixels) nor variants
    (BiDO**, TL-DMI-5, Trap-MID*, early-stopped NoDef, a dose-response λ)."""
    df = crowded_summary()
    df = pd.concat([df, df[df["defense"] == "atat"].assign(defense="atat_w1")],
                   ignore_index=True)
    fig, n = figures._accuracy_vs_privacy_figure(df, attacks=["ppa"], metrics=["attacc1"],
                                                 architecture="resnet18")
    names = {t.get_text() for t in fig.axes[0].get_children()
             if isinstance(t, matplotlib.text.Annotation)}
    assert names == {figures.label(figures.DEFENSE_LABELS, d) for d in FIGURE4}
    points = [c for c in fig.axes[0].collections
              if isinstance(c, matplotlib.collections.PathCollection)]
    assert len(points) == len(FIGURE4)
    assert len(fig.axes[0].containers) == len(FIGURE4)            # each with its error bars


def test_figure4_stacks_attack_metric_rows_over_one_column_per_dataset():
    """Panels grow downwards (one row per attack and metric, one column per dataset), so the
    figure stays a screen wide however many metrics there are."""
    df = crowded_summary()
    df = pd.concat([df, df.assign(dataset="synthfaces_b")], ignore_index=True)
    fig, n = figures._accuracy_vs_privacy_figure(df, attacks=["ppa", "ifgmi"],
                                                 metrics=["attacc1", "dist_face"],
                                                 architecture="resnet18",
                                                 per_image=per_image_of(df))
    assert n == 8
    assert fig.axes[0].get_subplotspec().get_geometry()[:2] == (4, 2)
    grid = [[ax for ax in fig.axes if ax.get_subplotspec().rowspan.start == r] for r in range(4)]
    assert [[ax.get_title() for ax in row] for row in grid] == \
        [["SynthFaces / ResNet-18", "SynthFaces-B / ResNet-18"]] * 4
    assert [row[0].get_ylabel().split("\n")[0] for row in grid] == [
        "PPA AttAcc@1", "PPA δ_face (squared L2)", "IF-GMI AttAcc@1", "IF-GMI δ_face (squared L2)"]


def test_place_labels_spreads_labels_of_coincident_points():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2.5))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    anns = figures.place_labels(ax, [0.5] * 6, [0.5] * 6, [f"defense {i}" for i in range(6)])
    fig.canvas.draw()
    boxes = [_extent(a, fig.canvas.get_renderer()) for a in anns]
    assert all(not _overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    axbox = ax.get_window_extent(fig.canvas.get_renderer())
    assert all(axbox.x0 <= b.x0 and b.x1 <= axbox.x1 for b in boxes)
    plt.close(fig)


# ----------------------------------------------------------- robustness figure, Figure 2

def test_robustness_figure_legend_beside_the_data_and_atat_red(tmp_path, saved):
    csv = tmp_path / "summary.csv"
    crowded_summary().to_csv(csv, index=False)
    figures.robust_accuracy_vs_epsilon(csv, tmp_path / "r.png", epsilons=EPS)
    fig = saved[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0]
    assert len(legend.get_texts()) == len(DEFENSES)
    assert not any(_overlap(legend.get_window_extent(renderer), ax.get_window_extent(renderer))
                   for ax in fig.axes)
    colours = {t.get_text(): h.get_color() for t, h in zip(legend.get_texts(),
                                                          legend.legend_handles)}
    assert colours["AT-AT"] == figures.ATAT_COLOR
    assert figures.ATAT_COLOR not in [c for k, c in colours.items() if k != "AT-AT"]
    styles = {(h.get_color(), h.get_marker()) for h in legend.legend_handles}
    assert len(styles) == len(DEFENSES)                   # every defense told apart
    assert "[0, 1] pixel units" in fig.axes[0].get_xlabel()
    assert not _small_fonts(fig)


def test_figure2_legend_beside_the_data(tmp_path, saved):
    from test_tables import simulated_summary, with_counts

    from atat.analysis.tables import load_specs

    specs = {s["name"]: s for s in load_specs(ROOT / "config" / "regressions.yaml")}
    figures.observed_vs_predicted(with_counts(simulated_summary()),
                                  specs["T15_ppa_generic_joint_ols"], tmp_path / "f2.png")
    fig = saved[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    assert not _overlap(ax.get_legend().get_window_extent(renderer),
                        ax.get_window_extent(renderer))
    assert ax.get_ylabel() == "observed PPA AttAcc@1"
    assert not _small_fonts(fig)


# ------------------------------------------------------------------ reconstruction grids

def _grid_inputs(tmp_path, defenses, resolution=32):
    from atat.data.synthfaces import generate_synthfaces

    generate_synthfaces(tmp_path / "ds", n_private_identities=2, n_public_identities=1,
                        images_per_identity=6, public_images_per_identity=1,
                        resolution=resolution, seed=1, progress=False)
    paths = {}
    for i, d in enumerate(defenses):
        best = {c: {"evalconf": 0.05 * i,
                    "image": torch.full((3, resolution, resolution), 10 * i, dtype=torch.uint8)}
                for c in (0, 1)}
        paths[d] = tmp_path / f"{d}.pt"
        io.torch_save(best, paths[d])
    return paths


@pytest.mark.parametrize("n_defenses", [2, len(DEFENSES)])
def test_reconstruction_grid_titles_do_not_overlap(tmp_path, n_defenses):
    paths = _grid_inputs(tmp_path, list(DEFENSES)[-n_defenses:])
    title = "PPA reconstructions, synthfaces / resnet18 (each: max. evaluation confidence)"
    fig, classes = figures._reconstruction_grid_figure(paths, tmp_path / "ds" / "private",
                                                       n_classes=4, title=title)
    assert classes == [0, 1]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    titles = [ax.title for ax in fig.axes if ax.title.get_text()]
    assert len(titles) == n_defenses + 1
    boxes = [t.get_window_extent(renderer) for t in titles]
    assert all(not _overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    figbox = fig.bbox
    sup = fig._suptitle.get_window_extent(renderer)
    assert figbox.x0 <= sup.x0 and sup.x1 <= figbox.x1 and sup.y1 <= figbox.y1
    assert not any(_overlap(sup, b) for b in boxes)
    assert all(im.get_interpolation() == "nearest" for ax in fig.axes for im in ax.images)
    assert not _small_fonts(fig)


def test_reconstruction_grid_puts_the_training_image_beside_each_defense(tmp_path):
    paths = _grid_inputs(tmp_path, ["nodef", "atat"])
    io.torch_save({1: io.torch_load(paths["atat"])[1]}, paths["atat"])   # AT-AT: class 1 only
    out = tmp_path / "grid.png"
    assert figures.reconstruction_grid(paths, tmp_path / "ds" / "private", out) == [1]
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_wrap_title_fits_the_column():
    wrapped = figures.wrap_title("Unseen-Pixels mask stage 1 (GL)", 1.15)
    assert wrapped.count("\n") >= 1
    assert max(len(line) for line in wrapped.split("\n")) <= int(1.15 * 72 / (0.62 * 8))


# ----------------------------------------------------------------------------- Figure 5

def test_select_adversarial_examples_prefers_flips_at_the_smallest_epsilon():
    mis = {0.031: [True, True, True, True, False],
           0.0025: [False, True, False, True, False],
           0.0005: [False, False, False, True, False],
           1e-05: [False] * 5}
    assert figures.select_adversarial_examples(mis, 3) == [3, 1, 0]
    assert figures.select_adversarial_examples(mis, 10) == [3, 1, 0, 2, 4]
    assert figures.select_adversarial_examples({0.1: [False, False]}, 1) == [0]   # pool order
    with pytest.raises(ValueError, match="one flag per pool candidate"):
        figures.select_adversarial_examples({0.1: [True], 0.2: [True, False]}, 1)


class _Labelled:
    """A stand-in dataset: image i is the constant i, its label ``labels[i]``."""

    def __init__(self, labels):
        self.targets = list(labels)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return torch.full((1, 2, 2), float(i)), self.targets[i]


def test_clean_correct_pool_skips_misclassified_images():
    labels = [0, 1, 0, 1, 0, 1, 0, 1, 0, 1]
    ds = _Labelled(labels)

    def always_one(x):                                   # right on the odd images only
        return torch.tensor([[0.0, 1.0]]).repeat(len(x), 1)

    order = torch.randperm(len(ds), generator=torch.Generator().manual_seed(3)).tolist()
    pool, seen = figures.clean_correct_pool(always_one, ds, pool_size=3, seed=3, batch_size=4)
    assert pool == [i for i in order if labels[i] == 1][:3]
    assert all(labels[i] == 1 for i in pool)
    assert seen == order.index(pool[-1]) + 1             # stopped once the pool was full
    pool_all, seen_all = figures.clean_correct_pool(always_one, ds, pool_size=50, seed=3)
    assert sorted(pool_all) == [1, 3, 5, 7, 9] and seen_all == len(ds)
    assert figures.clean_correct_pool(always_one, ds, pool_size=3, seed=3)[0] == pool  # seeded


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tiny_recipe, make_synthfaces):
    """A ResNet-18 trained one epoch on a 16 px synthetic dataset (only the checkpoint format
    matters: the tests below overwrite its head)."""
    from atat.training.train import TrainSpec, train

    tmp = tmp_path_factory.mktemp("fig5")
    make_synthfaces(tmp / "ds", n_private_identities=3, images_per_identity=20, seed=1)
    recipe = tiny_recipe(lr_milestones=[])
    aug = {"random_resized_crop": False, "rrc_scale": [0.85, 1.0], "horizontal_flip": False,
           "color_jitter": False, "jitter": {"brightness": 0.2, "contrast": 0.2,
                                              "saturation": 0.1, "hue": 0.1}}
    spec = TrainSpec(model_id="t/resnet18/nodef/seed0", dataset_root=str(tmp / "ds/private"),
                     resolution=16, n_classes=3, architecture="resnet18",
                     defense={"type": "nodef"}, training=recipe, augmentation=aug, seed=0)
    train(spec, out_model=tmp / "m.pt", out_metrics=tmp / "m.json", resume_path=tmp / "r.pt",
          progress=False)
    return tmp


def test_figure5_skips_misclassified_images_and_stays_within_each_epsilon(tiny_model,
                                                                          tmp_path, saved):
    from atat.data.loading import ManifestDataset
    from atat.training.train import load_model

    root = tiny_model / "ds" / "private"
    labels = ManifestDataset(root, "test").targets
    seed = 5
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed)).tolist()
    # the model answers class k whatever the image: k is not the class of the first image of
    # the seeded order, so the first example(s) are misclassified and must be skipped
    k = next(labels[i] for i in order if labels[i] != labels[order[0]])
    ckpt = io.torch_load(tiny_model / "m.pt")
    ckpt["state_dict"]["head.weight"].zero_()
    ckpt["state_dict"]["head.bias"].copy_(torch.nn.functional.one_hot(torch.tensor(k), 3) * 5.0)
    io.torch_save(ckpt, tmp_path / "k.pt")
    out = figures.adversarial_examples_figure(tmp_path / "k.pt", root, [1e-5, 0.5],
                                              tmp_path / "fig5.png", n_images=3, iterations=3,
                                              seed=seed, pool_size=50)
    assert out["pool"] == labels.count(k) and out["scanned"] == len(labels)
    assert out["shown"] == [i for i in order if labels[i] == k][:3]
    assert order[0] not in out["shown"]
    assert out["true"] == [k] * len(out["shown"])
    model, defense, _ = load_model(tmp_path / "k.pt")
    with torch.no_grad():                          # clean-correct, checked independently
        x = torch.stack([ManifestDataset(root, "test", figures_transform(16))[i][0]
                         for i in out["shown"]])
        assert defense.logits(model, x).argmax(1).tolist() == out["true"]
    assert out["linf"][1e-5] <= 1e-5 + 2e-7       # within the budget (float32 rounding near 1)
    assert 0.05 < out["linf"][0.5] <= 0.5 * (1 + 1e-6)   # a large budget is used
    assert out["flipped"] == {1e-5: 0.0, 0.5: 0.0}       # a constant model cannot be fooled
    fig = saved[0]
    titles = [ax.get_title() for ax in fig.axes[:3]]
    assert titles[1] == f"ε = 1e-05\nnone of {out['pool']} flipped"     # said on the panel
    assert all(ax.get_xlabel().endswith("unchanged") for ax in fig.axes
               if ax.get_xlabel().startswith("pred"))
    assert not _small_fonts(fig)


def figures_transform(resolution):
    from atat.data.loading import build_transform

    return build_transform(resolution, train=False)


def test_robustness_figure_tells_several_atat_variants_apart(tmp_path, saved):
    summ = crowded_summary()
    atat = summ[summ["defense"] == "atat"]
    summ = pd.concat([summ, atat.assign(defense="atat_w0p25"), atat.assign(defense="atat_w1")])
    summ.to_csv(tmp_path / "s.csv", index=False)
    figures.robust_accuracy_vs_epsilon(tmp_path / "s.csv", tmp_path / "r.png", epsilons=EPS)
    legend = saved[0].legends[0]
    red = [(t.get_text(), h.get_marker(), h.get_linestyle()) for t, h in
           zip(legend.get_texts(), legend.legend_handles) if h.get_color() == figures.ATAT_COLOR]
    assert [r[0] for r in red] == ["AT-AT", "AT-AT (λ = 0.25)", "AT-AT (λ = 1)"]
    assert len({r[1:] for r in red}) == 3


# ------------------------------------------------------ error bars: 95% intervals (issue 45)

def _two_defenses() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A small fabricated cell: NoDef (two seeds, pooled) and AT-AT (one seed), with the
    counts the records write, and a per-image table whose per-class means are known."""
    rows = [
        {"defense": "nodef", "defense_type": "nodef", "seed": 0, "test_acc": 150 / 200,
         "ppa_attacc1": 37 / 100, "ppa_dist_face": 1.0},
        {"defense": "nodef", "defense_type": "nodef", "seed": 1, "test_acc": 146 / 200,
         "ppa_attacc1": 41 / 100, "ppa_dist_face": 1.1},
        {"defense": "atat", "defense_type": "atat", "seed": 0, "test_acc": 130 / 200,
         "ppa_attacc1": 12 / 100, "ppa_dist_face": 1.5}]
    summ = pd.DataFrame([{"dataset": "synthfaces", "architecture": "resnet18",
                          "treatment": np.nan, "n_test": 200, "ppa_n_images": 100,
                          "robust_acc_eps0.031": 10 / 64, "aa_n_examples_eps0.031": 64,
                          "robust_acc_eps0.0025": 40 / 64 if r["defense"] == "atat" else 3 / 64,
                          "aa_n_examples_eps0.0025": 64, **r} for r in rows])
    dist = {("nodef", 0): [0.9, 1.0, 1.1], ("nodef", 1): [1.2, 1.0, 1.1],
            ("atat", 0): [1.4, 1.5, 1.6]}
    per_image = pd.DataFrame([
        {"dataset": "synthfaces", "architecture": "resnet18", "defense": d, "seed": sd,
         "attack": "ppa", "class": c, "correct_top1": 0, "correct_top5": 0,
         "dist_face": v + 0.01 * k}
        for (d, sd), vals in dist.items() for c, v in enumerate(vals) for k in (-1, 1)])
    return summ, per_image


def test_figure4_error_bars_are_the_tables_intervals():
    """Both axes carry the 95% intervals of atat.analysis.stats.intervals: clean accuracy and AttAcc@1
    Wilson over the pooled counts (test images, attacked images), δ_face the t interval over
    per-class means of the per-image table (as Tables 27/28) -- plotted exactly."""
    from atat.analysis.stats.intervals import t_interval_mean, wilson_interval

    summ, per_image = _two_defenses()
    fig, n = figures._accuracy_vs_privacy_figure(summ, attacks=["ppa"],
                                                 metrics=["attacc1", "dist_face"],
                                                 architecture="resnet18", per_image=per_image)
    assert n == 2
    acc = {"nodef": wilson_interval(296, 400), "atat": wilson_interval(130, 200)}
    att = {"nodef": wilson_interval(78, 200), "atat": wilson_interval(12, 100)}
    means = {"nodef": [(0.9 + 1.2) / 2, 1.0, 1.1], "atat": [1.4, 1.5, 1.6]}
    dist = {d: t_interval_mean(v) for d, v in means.items()}
    names = {"NoDef": "nodef", "AT-AT": "atat"}
    for ax, expect in zip(fig.axes, (att, {d: (t["ci_low"], t["ci_high"])
                                           for d, t in dist.items()})):
        conts = [c for c in ax.containers
                 if isinstance(c, matplotlib.container.ErrorbarContainer)]
        assert sorted(c.get_label() for c in conts) == ["AT-AT", "NoDef"]
        for c in conts:
            d = names[c.get_label()]
            (xseg,), (yseg,) = _bars(c)
            assert (xseg[0][0], xseg[1][0]) == pytest.approx(acc[d])
            assert (yseg[0][1], yseg[1][1]) == pytest.approx(expect[d])
    # the point is the estimate its interval is about (pooled seeds; mean of class means)
    pts = {tuple(np.round(o, 9)) for ax in fig.axes[1:] for c in ax.collections
           if isinstance(c, matplotlib.collections.PathCollection) for o in c.get_offsets()}
    assert (round(296 / 400, 9), round(dist["nodef"]["mean"], 9)) in pts
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "95% intervals" in title and "Wilson" in title and "Student t" in title


def test_figure4_without_a_count_stops_with_a_message():
    summ, per_image = _two_defenses()
    kw = dict(attacks=["ppa"], architecture="resnet18", per_image=per_image)
    with pytest.raises(ValueError, match=r"lacks the count column\(s\) \['n_test'\]"):
        figures._accuracy_vs_privacy_figure(summ.drop(columns="n_test"), metrics=["attacc1"],
                                            **kw)
    with pytest.raises(ValueError, match=r"\['ppa_n_images'\]"):
        figures._accuracy_vs_privacy_figure(summ.drop(columns="ppa_n_images"),
                                            metrics=["attacc1"], **kw)
    with pytest.raises(ValueError, match="per-image table"):
        figures._accuracy_vs_privacy_figure(summ, metrics=["dist_face"], attacks=["ppa"],
                                            architecture="resnet18")
    gap = summ.copy()
    gap.loc[0, "n_test"] = np.nan                     # one model's record without its count
    with pytest.raises(ValueError, match="nodef test_acc: missing value or image count"):
        figures._accuracy_vs_privacy_figure(gap, metrics=["attacc1"], **kw)


def test_robustness_figure_error_bars_are_wilson_intervals(tmp_path, saved):
    from atat.analysis.stats.intervals import wilson_interval

    summ, _ = _two_defenses()
    csv = tmp_path / "s.csv"
    summ.to_csv(csv, index=False)
    figures.robust_accuracy_vs_epsilon(csv, tmp_path / "r.png", epsilons=[0.031, 0.0025])
    ax = saved[0].axes[0]
    conts = {c.get_label(): c for c in ax.containers}
    (yseg,) = _bars(conts["NoDef"])[1:]
    # ε ascending on the x axis: 0.0025 (3 + 3 of 2 x 64 images), 0.031 (10 + 10)
    assert np.allclose([(s[0][1], s[1][1]) for s in yseg],
                       [wilson_interval(6, 128), wilson_interval(20, 128)])
    (star,) = _bars(conts["AT-AT clean"])[1:]
    assert (star[0][0][1], star[0][1][1]) == pytest.approx(wilson_interval(130, 200))
    assert "95% Wilson" in saved[0].legends[0].get_title().get_text()
    with pytest.raises(ValueError, match=r"\['aa_n_examples_eps0.0025'\]"):
        summ.drop(columns="aa_n_examples_eps0.0025").to_csv(csv, index=False)
        figures.robust_accuracy_vs_epsilon(csv, tmp_path / "r2.png", epsilons=[0.031, 0.0025])


def test_figure2_error_bars_in_both_axes(tmp_path, saved):
    """Observed leakage: each model's Wilson interval over its attacked images; predicted
    leakage: the 95% interval of the fitted mean (statsmodels, the fit's HC2 covariance)."""
    from test_tables import simulated_summary, with_counts

    from atat.analysis.stats.intervals import wilson_interval
    from atat.analysis.stats.regression import build_design, fit_spec

    from atat.analysis.tables import load_specs

    specs = {s["name"]: s for s in load_specs(ROOT / "config" / "regressions.yaml")}
    spec = specs["T15_ppa_generic_joint_ols"]
    summ = with_counts(simulated_summary())
    info = figures.observed_vs_predicted(summ, spec, tmp_path / "f2.png")
    arr = info["arrays"]
    fit = fit_spec(summ, spec)
    idx = fit["data"].index
    expect = [wilson_interval(round(summ.loc[i, "ppa_attacc1"] * 100), 100) for i in idx]
    assert np.allclose(arr["y_low"], [e[0] for e in expect])
    assert np.allclose(arr["y_high"], [e[1] for e in expect])
    band = fit["result"].get_prediction(build_design(fit["data"], fit["spec"])[0]).conf_int()
    assert np.allclose(arr["x_low"], band[:, 0]) and np.allclose(arr["x_high"], band[:, 1])
    assert (arr["x_low"] < arr["x"]).all() and (arr["x"] < arr["x_high"]).all()
    # and that is what is drawn
    ax = saved[0].axes[0]
    xs, ys = zip(*[_bars(c) for c in ax.containers])
    drawn_x = sorted((s[0][0], s[1][0]) for seg in xs for s in seg)
    assert np.allclose(drawn_x, sorted(zip(arr["x_low"], arr["x_high"])))
    drawn_y = sorted((s[0][1], s[1][1]) for seg in ys for s in seg)
    assert np.allclose(drawn_y, sorted(zip(arr["y_low"], arr["y_high"])))
    assert "95% intervals" in ax.get_legend().get_title().get_text()
    with pytest.raises(ValueError, match=r"\['ppa_n_images'\]"):
        figures.observed_vs_predicted(summ.drop(columns="ppa_n_images"), spec,
                                      tmp_path / "f2b.png")


def test_figure4_interval_note_stays_above_the_panels_of_a_tall_figure():
    """The note on the bars sits above the first row however many rows the figure has (at a
    fraction of the height it sank into the first panel of the 15-row figure of a run)."""
    summ = crowded_summary()
    fig, n = figures._accuracy_vs_privacy_figure(
        summ, attacks=["ppa", "ifgmi", "ppdg"], metrics=["attacc1", "dist_face"],
        architecture="resnet18", per_image=per_image_of(summ))
    assert n == 6
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    note = fig._suptitle.get_window_extent(renderer)
    assert note.y1 <= fig.bbox.y1
    for ax in fig.axes:
        assert note.y0 >= ax.title.get_window_extent(renderer).y1
        assert not _overlap(note, ax.get_window_extent(renderer))
