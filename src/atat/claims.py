"""The paper's claims, one row each, against what this run measured (issue 17).

Each row names a claim of the paper (section, the paper's own number where the text gives
one), the run's estimate with its 95% interval, and a verdict:

* ``supported``: the run's 95% interval lies on the paper's side of zero (or of the other
  model's value);
* ``consistent``: the estimate is on the paper's side but the interval does not exclude the
  other side; for a claim of *no* effect ("does not reduce HSIC"), no significant effect in
  the forbidden direction -- absence of evidence, never more than ``consistent``;
* ``inconclusive``: the estimate is on the other side, not significantly;
* ``contradicted``: the 95% interval lies on the other side (for a no-effect claim: a
  significant effect in the forbidden direction);
* ``not testable``: an input is missing or the experiment's precondition (results/tables/
  preconditions.csv) failed; the basis column says which.

The verdicts follow mechanically from the intervals; the thresholds are the conventional 95%
ones, fixed before any result was read. Intervals: Newcombe's hybrid score interval for the
difference of two AttAcc@1 rates (statsmodels), Welch's t for differences of means (per-class
mean distances; per-batch HSIC values), the regressions' own intervals (App. G), the causal
Beta fit (App. H). Inputs are the workflow's own outputs; numbers that have a home elsewhere
come from it (a single rate's interval: :func:`atat.tables.main_results`; the causal fit:
:func:`atat.stats.causal.causal_table`; the dose-response points: its table). Several parts
of one claim (e.g. a slope at each epsilon) combine to the weakest part's verdict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from atat import io
from atat.paper import (BASELINE_TYPES, DEFENSE_LABELS, claims_cell, is_standard_variant,
                        label, output, section3_roles)

#: The columns of results/tables/claims.csv.
COLUMNS = ["claim", "section", "statement", "paper", "run", "verdict", "basis"]
VERDICTS = ("supported", "consistent", "inconclusive", "contradicted", "not testable")
#: Paper §3: "Neither BiDO nor the defenses TL-DMI and NegLS ... significantly decrease HSIC".
HSIC_CLAIM_TYPES = ("bido", "tldmi", "negls")


@dataclass
class Claim:
    claim: str
    section: str
    statement: str
    paper: str
    run: str = ""
    verdict: str = "not testable"
    basis: str = ""


# ------------------------------------------------------------------------------ intervals
def rate_difference(p1: float, n1: int, p2: float, n2: int) -> tuple[float, float, float]:
    """p1 - p2 and its 95% Newcombe (hybrid score) interval; rates measured on n1, n2 trials."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    c1, c2 = int(round(p1 * n1)), int(round(p2 * n2))
    lo, hi = confint_proportions_2indep(c1, n1, c2, n2, method="newcomb", compare="diff")
    return c1 / n1 - c2 / n2, float(lo), float(hi)


def mean_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its 95% Welch t interval."""
    from scipy import stats as sps

    a, b = np.asarray(a, float), np.asarray(b, float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        raise ValueError("need at least 2 values on each side")
    ci = sps.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    return float(a.mean() - b.mean()), float(ci.low), float(ci.high)


def directional(est: float, lo: float, hi: float, sign: int) -> str:
    """Verdict for a claim that the quantity has ``sign`` (+1: positive, -1: negative)."""
    if not np.isfinite(est):
        return "not testable"
    if (lo > 0 if sign > 0 else hi < 0):
        return "supported"
    if (hi < 0 if sign > 0 else lo > 0):
        return "contradicted"
    return "consistent" if est * sign > 0 else "inconclusive"


def no_effect(lo: float, hi: float, forbidden: int) -> str:
    """Verdict for a claim of no effect in direction ``forbidden`` (-1: 'does not reduce')."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "not testable"
    return "contradicted" if (hi < 0 if forbidden < 0 else lo > 0) else "consistent"


def _fmt(est: float, lo: float, hi: float, digits: int = 3) -> str:
    return f"{est:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _worst(verdicts: Iterable[str]) -> str:
    """Several parts of one claim: the weakest verdict (contradicted < inconclusive < not
    testable < consistent < supported)."""
    order = ["contradicted", "inconclusive", "not testable", "consistent", "supported"]
    vs = list(verdicts)
    return min(vs, key=order.index) if vs else "not testable"


# ------------------------------------------------------------------------------ the inputs
@dataclass
class Inputs:
    config: Mapping[str, Any]
    summary: pd.DataFrame
    main: pd.DataFrame                  # atat.tables.main_results: AttAcc / delta rows, CIs
    per_image: pd.DataFrame
    tidy: pd.DataFrame | None           # results/stats/regressions.csv
    causal: pd.DataFrame | None         # atat.stats.causal.causal_table
    cost: pd.DataFrame | None           # results/tables/cost_of_privacy.csv (raw)
    hsic: dict[str, dict[str, Any]]     # defense -> HSIC json of the main cell
    preconditions: pd.DataFrame | None
    dose: pd.DataFrame | None           # atat.dose_response.dose_response_frame
    dataset: str
    architecture: str

    def defenses_of(self, *types: str) -> list[str]:
        """The standard variant of each defense type (the defense named after its type)."""
        return [t for t in types
                if t in self.config["defenses"] and is_standard_variant(self.config, t)]

    def cell(self, defense: str, attack: str) -> pd.Series | None:
        m = self.main
        hit = m[(m["dataset"] == self.dataset) & (m["architecture"] == self.architecture)
                & (m["defense"] == defense) & (m["attack"] == attack)]
        return None if hit.empty else hit.iloc[0]

    def classes(self, defense: str, attack: str, metric: str) -> np.ndarray:
        p = self.per_image
        g = p[(p["dataset"] == self.dataset) & (p["architecture"] == self.architecture)
              & (p["defense"] == defense) & (p["attack"] == attack)]
        return g.groupby("class")[metric].mean().to_numpy(float) if metric in g else np.array([])

    def precondition(self, experiment: str, cell: tuple[str, str] | None = None
                     ) -> tuple[bool | None, str]:
        """(all checks of ``experiment`` passed, the failed checks) -- None: not checked.
        ``cell`` = (dataset, architecture): only the checks of that cell's models (model
        names ``<dataset>/<architecture>/...``), so a claim about one cell is not decided by
        another cell's models (e.g. the demo's DenseNet-47 AT-AT for the ResNet-18 claims)."""
        pc = self.preconditions
        if pc is None or pc.empty:
            return None, "no preconditions table"
        rows = pc[pc["experiment"] == experiment]
        if cell is not None:
            from atat.preconditions import cell_prefix
            rows = rows[rows["model"].astype(str).str.startswith(cell_prefix(*cell))]
        if rows.empty:
            return None, f"no {experiment} precondition rows"
        # rows without a threshold (passed empty) are informational, not checks
        failed = rows.loc[rows["passed"].astype(str).str.lower().isin(["false", "0"]),
                          "check"].drop_duplicates().tolist()
        return (not failed), ("failed: " + ", ".join(failed)) if failed else "passed"


def _lab(defense: str) -> str:
    return label(DEFENSE_LABELS, defense)


def _rate_vs(inp: Inputs, a: str, b: str, attack: str) -> tuple[float, float, float] | None:
    ra, rb = inp.cell(a, attack), inp.cell(b, attack)
    if ra is None or rb is None:
        return None
    return rate_difference(ra["attacc1"], int(ra["n_images"]), rb["attacc1"], int(rb["n_images"]))


def _hsic_batches(inp: Inputs, defense: str) -> np.ndarray | None:
    """Per-batch HSIC(X, Z) averaged over the measured layers."""
    r = inp.hsic.get(defense)
    if r is None:
        return None
    cols = [np.asarray(v, float) for v in r["raw"]["hsic_xz"].values()]
    return np.mean(np.vstack(cols), axis=0) if cols else None


# ------------------------------------------------------------------------------ the claims
def _hsic_claims(inp: Inputs, nodef: str) -> list[Claim]:
    out = []
    base = _hsic_batches(inp, nodef)
    for d in inp.defenses_of(*HSIC_CLAIM_TYPES):
        c = Claim(f"hsic_{d}", "§3 (1), Table 1",
                  f"{_lab(d)} does not lower HSIC(X,Z) below NoDef's (while lowering PPA "
                  "AttAcc@1)", "not significantly lower (BiDO, TL-DMI, NegLS)")
        mine = _hsic_batches(inp, d)
        if base is None or mine is None:
            c.basis = "HSIC of NoDef or the defense not measured"
            out.append(c)
            continue
        est, lo, hi = mean_difference(mine, base)
        c.verdict = no_effect(lo, hi, forbidden=-1)
        att = _rate_vs(inp, d, nodef, "ppa")
        premise = ("" if att is None else
                   f"; PPA AttAcc@1 minus NoDef's {_fmt(*att)}"
                   + ("" if att[2] < 0 else " (the defense does not lower AttAcc@1 significantly "
                      "here, so the claim's premise is not met)"))
        c.run = f"HSIC(X,Z) minus NoDef's {_fmt(est, lo, hi, 4)}{premise}"
        c.basis = "Welch 95% interval over per-batch HSIC (mean over layers)"
        out.append(c)
    return out


def _bido_star_claim(inp: Inputs, nodef: str) -> list[Claim]:
    labels = output("table1").labels
    star = next((d for d, lab in labels.items() if lab == "BiDO**"), None)
    c = Claim("hsic_bido_star", "§3 (1), App. D.1",
              "BiDO** lowers HSIC(X,Z) below BiDO's yet defends worse (higher PPA AttAcc@1)",
              "lower HSIC, worse defense")
    if star is None or "bido" not in inp.hsic or star not in inp.hsic:
        c.basis = "BiDO or BiDO** not measured"
        return [c]
    h = mean_difference(_hsic_batches(inp, star), _hsic_batches(inp, "bido"))
    a = _rate_vs(inp, star, "bido", "ppa")
    if a is None:
        c.basis = "PPA of BiDO or BiDO** missing"
        return [c]
    c.verdict = _worst([directional(*h, sign=-1), directional(*a, sign=+1)])
    c.run = (f"{_lab(star)} minus BiDO: HSIC(X,Z) {_fmt(*h, 4)}, PPA AttAcc@1 {_fmt(*a)}")
    c.basis = "Welch (HSIC per batch), Newcombe (AttAcc@1); both parts must hold"
    return [c]


def _permuted_claim(inp: Inputs, nodef: str) -> list[Claim]:
    from atat.paper import permuted_defenses

    out = []
    ok, why = inp.precondition("permuted labels", (inp.dataset, inp.architecture))
    for d in permuted_defenses(inp.config):
        c = Claim(f"permuted_{d}", "§3 (2), Table 2",
                  "a model that rote-memorises permuted labels leaks less: larger PPA "
                  "delta_face (L2 to the nearest training image) than NoDef",
                  "train acc. > 99.4%; reconstructions collapse (high L2)")
        a, b = inp.classes(d, "ppa", "dist_face"), inp.classes(nodef, "ppa", "dist_face")
        if a.size < 2 or b.size < 2:
            c.basis = "PPA per-image distances missing"
        else:
            diff = mean_difference(a, b)
            c.run = f"delta_face minus NoDef's {_fmt(*diff)}"
            c.verdict = directional(*diff, sign=+1) if ok is not False else "not testable"
            c.basis = f"Welch 95% over per-class means; precondition {why}"
        out.append(c)
    return out


def _unseen_pixels_claim(inp: Inputs) -> list[Claim]:
    roles = section3_roles(inp.config)
    ok, why = inp.precondition("Unseen-Pixels", (inp.dataset, inp.architecture))
    out = []
    for d in roles["Unseen-Pixels"]:
        for base in roles["NoDef (early-stopped)"]:
            c = Claim(f"unseen_pixels_{d}", "§3 (3), Table 3",
                      "a model that never saw > 97% of the pixels is not significantly more "
                      "private (PPA AttAcc@1) than NoDef of about its accuracy (early-stopped)",
                      "> 50% AttAcc@1; only marginally more private than NoDef-ES")
            diff = _rate_vs(inp, d, base, "ppa")
            if diff is None:
                c.basis = "PPA of Unseen-Pixels or NoDef-ES missing"
            else:
                c.run = f"PPA AttAcc@1 minus NoDef-ES's {_fmt(*diff)}"
                c.verdict = (no_effect(diff[1], diff[2], forbidden=-1) if ok is not False
                             else "not testable")
                c.basis = f"Newcombe 95%; precondition {why}"
            out.append(c)
    return out


def _tidy_rows(inp: Inputs, spec: str) -> pd.DataFrame:
    t = inp.tidy
    return pd.DataFrame() if t is None else t[t["spec"] == spec]


def _term(rows: pd.DataFrame, term: str) -> tuple[float, float, float] | None:
    if rows.empty:          # no regressions in this run (an empty frame has no columns)
        return None
    r = rows[(rows["term"] == term) & (rows["status"] == "ok")]
    return None if r.empty else (float(r["estimate"].iloc[0]), float(r["ci_low"].iloc[0]),
                                 float(r["ci_high"].iloc[0]))


def _tradeoff_claims(inp: Inputs) -> list[Claim]:
    eps_terms = ["robust_acc_eps0.0025", "robust_acc_eps0.0005", "robust_acc_eps1e-05"]
    out = []
    for table, attack, sample, claim, paper in (
            ("T15", "ppa", "generic", "generic defenses: PPA AttAcc@1 rises with robust "
             "accuracy at each epsilon (test acc. controlled)", "significant at all eps; "
             "R2 0.93-0.95 (joint OLS)"),
            ("T18", "ifgmi", "generic", "generic defenses: IF-GMI AttAcc@1 rises with robust "
             "accuracy at each epsilon", "significant at all eps; R2 0.93-0.95")):
        c = Claim(f"tradeoff_{attack}", "§4, Table 5, App. G", claim, paper)
        parts, verdicts = [], []
        for term in eps_terms:
            eps = term.split("eps")[1]
            rows = _tidy_rows(inp, f"{table}_{attack}_{sample}_eps{eps}_ols")
            t = _term(rows, term)
            if t is None:
                reason = (rows["reason"].iloc[0] if len(rows) and "reason" in rows else
                          "spec not fitted")
                parts.append(f"eps {eps}: not fitted ({reason})")
                verdicts.append("not testable")
                continue
            parts.append(f"eps {eps}: {_fmt(*t)}")
            verdicts.append(directional(*t, sign=+1))
        joint = _tidy_rows(inp, f"{table}_{attack}_{sample}_joint_ols")
        ok = joint[joint["status"] == "ok"] if len(joint) else joint
        if len(ok):
            parts.append(f"joint OLS R2 {float(ok['r2'].iloc[0]):.2f} (n {int(ok['n'].iloc[0])})")
        c.run = "; ".join(parts)
        c.verdict = _worst(verdicts)
        c.basis = "robust-accuracy slope of each single-eps OLS (test acc. + robust acc.), " \
                  "t(n-k) 95% with HC2 SEs"
        out.append(c)
    # clean accuracy adds little once robust accuracy is known (joint model)
    c = Claim("clean_acc_ppa", "§4, Table 5", "clean test accuracy is weakly or insignificantly "
              "related to PPA AttAcc@1 once robust accuracy is controlled (joint OLS)",
              "weak or insignificant")
    t = _term(_tidy_rows(inp, "T15_ppa_generic_joint_ols"), "test_acc")
    if t is None:
        c.basis = "T15_ppa_generic_joint_ols not fitted"
    else:
        c.run = f"test_acc slope {_fmt(*t)}"
        c.verdict = "consistent" if t[1] <= 0 <= t[2] else "contradicted"
        c.basis = "t(n-k) 95% with HC2 SEs; significant = contradicted (the paper allows " \
                  "'weak', which an interval cannot separate from 'none')"
    out.append(c)
    # gradient-suppressing defenses: the tradeoff does not hold
    c = Claim("tradeoff_gradient", "§4, Tables 16/19", "gradient-suppressing defenses do not "
              "follow the tradeoff (robust-accuracy slopes not all significant)",
              "the tradeoff does not hold")
    sig, seen = 0, 0
    for table, attack in (("T16", "ppa"), ("T19", "ifgmi")):
        for term in eps_terms:
            eps = term.split("eps")[1]
            t = _term(_tidy_rows(inp, f"{table}_{attack}_gradient_eps{eps}_ols"), term)
            if t is not None:
                seen += 1
                sig += t[1] > 0
    if seen:
        c.run = f"{sig} of {seen} robust-accuracy slopes significantly positive"
        c.verdict = "consistent" if sig < seen else "contradicted"
        c.basis = "the single-eps OLS of Tables 16/19"
    else:
        c.basis = "gradient specs not fitted"
    out.append(c)
    return out


def _cost_claims(inp: Inputs) -> list[Claim]:
    paper = {"robust_acc_eps0.0025": "0.31 (0.24-0.45)", "robust_acc_eps0.0005":
             "5.4 (2.9-58.3)", "robust_acc_eps1e-05": "0.91 (0.60-1.93)"}
    out = []
    cost = inp.cost
    for term, pv in paper.items():
        c = Claim(f"cost_{term}", "§4, App. G", f"the robustness cost of privacy at eps "
                  f"{term.split('eps')[1]}: pp of robust accuracy per pp of PPA AttAcc@1 "
                  "(Beta, T15 joint) is positive", pv)
        row = None if cost is None or cost.empty else cost[cost["term"] == term]
        if row is None or row.empty or not np.isfinite(float(row["gamma"].iloc[0])):
            note = "" if row is None or row.empty or "note" not in row else row["note"].iloc[0]
            c.basis = f"cost of privacy not computed {note}".strip()
        else:
            r = row.iloc[0]
            g, lo, hi = float(r["gamma"]), float(r["ci_low"]), float(r["ci_high"])
            c.run = _fmt(g, lo, hi, 2)
            c.verdict = directional(g, lo, hi, sign=+1)
            c.basis = "gamma = inverted Beta slope and its inverted 95% interval (App. G)"
        out.append(c)
    return out


def _causal_claim(inp: Inputs) -> list[Claim]:
    c = Claim("causal_atat", "§5, App. H, Table 21", "randomised AT-AT (treatment) lowers PPA "
              "AttAcc@1 against NoDef replicates (Beta regression)",
              "84% -> 6.5%, odds 77x lower, z = 38")
    t = inp.causal
    row = None if t is None else t[(t["model"] == "beta") & (t["response"] == "ppa_attacc1")]
    causal = inp.config.get("causal") or {}
    ok, why = inp.precondition("AT-AT", (causal.get("dataset", inp.dataset),
                                         causal.get("architecture", inp.architecture)))
    if row is None or row.empty or row["status"].iloc[0] != "ok":
        c.basis = ("no causal experiment" if row is None or row.empty
                   else f"skipped: {row['reason'].iloc[0]}")
        return [c]
    r = row.iloc[0]
    c.run = (f"{100 * r['mu0']:.1f}% -> {100 * r['mu1']:.1f}%, odds {r['odds_reduction']:.2f}x "
             f"lower, tau {_fmt(r['tau'], r['tau_ci_low'], r['tau_ci_high'], 2)}, "
             f"z = {r['tau_stat']:.1f}, n = {int(r['n'])}")
    c.verdict = (directional(r["tau"], r["tau_ci_low"], r["tau_ci_high"], sign=-1)
                 if ok is not False else "not testable")
    c.basis = f"Wald 95% on the logit scale; AT-AT precondition {why}"
    return [c]


def atat_cells(inp: Inputs) -> list[tuple[str, str]]:
    """(dataset, architecture) of every grid cell whose AT-AT model was attacked: the claims
    cell first, then the others in order (§6: "across all ... data, and attacks", Tables
    23-28 span every cell)."""
    m = inp.main[inp.main["defense"] == "atat"]
    cells = sorted({(str(d), str(a)) for d, a in zip(m["dataset"], m["architecture"])})
    main = (inp.dataset, inp.architecture)
    return [main] + [c for c in cells if c != main]


def _atat_vs_baselines(inp: Inputs) -> list[Claim]:
    out: list[Claim] = []
    main = (inp.dataset, inp.architecture)
    for cell in atat_cells(inp) if "atat" in inp.config["defenses"] else []:
        out += _atat_vs_baselines_in(dataclasses.replace(inp, dataset=cell[0],
                                                         architecture=cell[1]),
                                     suffix="" if cell == main else f"_{cell[0]}_{cell[1]}")
    return out


def _atat_vs_baselines_in(inp: Inputs, suffix: str) -> list[Claim]:
    atat = "atat"
    out = []
    ok, why = inp.precondition("AT-AT", (inp.dataset, inp.architecture))
    where = f" (cell {inp.dataset} / {inp.architecture})" if suffix else ""
    m = inp.main
    attacks = (m.loc[(m["dataset"] == inp.dataset) & (m["architecture"] == inp.architecture),
                     "attack"] if suffix else m["attack"]).unique()
    for attack in attacks:
        baselines = {b: rb for b in inp.defenses_of(*BASELINE_TYPES)
                     if (rb := inp.cell(b, attack)) is not None}
        n = len(baselines)
        # another cell trains only the baselines its net allows (no RoLSS on a DenseNet)
        whom = (f"each of the {n} baselines trained in the cell (of the paper's 7)" if suffix
                else "each of the 7 baselines")
        c = Claim(f"atat_{attack}{suffix}", "§6, Figure 4, Tables 23-28",
                  f"AT-AT has lower {attack.upper()} AttAcc@1 than {whom} at no lower test "
                  f"accuracy (none dominates it){where}",
                  "superior privacy at higher accuracy")
        me = inp.cell(atat, attack)
        if me is None:
            c.basis = "AT-AT not attacked"
            out.append(c)
            continue
        better, dominated_by = [], []
        for b, rb in baselines.items():
            est, lo, hi = rate_difference(me["attacc1"], int(me["n_images"]), rb["attacc1"],
                                          int(rb["n_images"]))
            if hi < 0:
                better.append(_lab(b))
            if lo > 0 and rb["test_acc"] >= me["test_acc"]:
                dominated_by.append(_lab(b))
        c.run = (f"AT-AT {me['attacc1']:.3f} at test acc. {me['test_acc']:.3f}; significantly "
                 f"lower than {len(better)} of {n} baselines ({', '.join(better) or 'none'}); "
                 f"dominated by {', '.join(dominated_by) or 'none'}")
        if ok is False or n == 0:
            c.verdict = "not testable"
            if n == 0:
                c.basis = "no baseline of the 7 attacked in this cell"
                out.append(c)
                continue
        elif dominated_by:
            c.verdict = "contradicted"
        else:
            c.verdict = "supported" if n and len(better) == n else "consistent"
        c.basis = ("Newcombe 95% per baseline; supported = lower than all, contradicted = a "
                   f"baseline significantly lower at >= AT-AT's accuracy; precondition {why}")
        out.append(c)
    return out


def _dose_claim(inp: Inputs) -> list[Claim]:
    d = inp.dose
    if d is None or d.empty or not inp.config.get("dose_response"):
        return []
    attack = str(inp.config["dose_response"]["attack"])
    col, ncol = f"{attack}_attacc1", f"{attack}_n_images"
    lo_row, hi_row = d.iloc[0], d.iloc[-1]
    c = Claim("dose_response", "beyond the paper (App. H's lambda)",
              f"{attack.upper()} AttAcc@1 falls as AT-AT's lambda grows", "(not in the paper)")
    diff = rate_difference(hi_row[col], int(hi_row[ncol]), lo_row[col], int(lo_row[ncol]))
    pts = ", ".join(f"{r['weight_adv']:g}: {r[col]:.2f}" for _, r in d.iterrows())
    c.run = (f"lambda {hi_row['weight_adv']:g} minus {lo_row['weight_adv']:g}: {_fmt(*diff)} "
             f"(all: {pts})")
    c.verdict = directional(*diff, sign=-1)
    c.basis = "Newcombe 95%, the largest lambda against the smallest"
    return [c]


def build_claims(inp: Inputs) -> pd.DataFrame:
    nodef = "nodef"
    claims: list[Claim] = []
    for part in (_hsic_claims(inp, nodef), _bido_star_claim(inp, nodef),
                 _permuted_claim(inp, nodef), _unseen_pixels_claim(inp), _tradeoff_claims(inp),
                 _cost_claims(inp), _causal_claim(inp), _atat_vs_baselines(inp),
                 _dose_claim(inp)):
        claims += part
    for c in claims:
        if c.verdict not in VERDICTS:  # pragma: no cover - a coding error above
            raise RuntimeError(f"claim {c.claim}: verdict {c.verdict!r}")
    return pd.DataFrame([c.__dict__ for c in claims], columns=COLUMNS)


# ------------------------------------------------------------------------------ seed variation
def seed_variation(summary: pd.DataFrame, config: Mapping[str, Any]) -> pd.DataFrame:
    """How much one model's numbers move with its seed: the causal experiment's replicates
    (one cell, same recipe, seeds ``causal.first_seed``...) per arm -- mean, SD, min, max of
    clean accuracy, robust accuracy at each epsilon and the attacks' AttAcc@1 / delta_face --
    next to the grid's first-seed model of the same variant (the number the tables show).
    Empty without a causal experiment."""
    causal = config.get("causal")
    if not causal or "treatment" not in summary or summary["treatment"].isna().all():
        return pd.DataFrame()
    cell = summary[(summary["dataset"] == causal["dataset"])
                   & (summary["architecture"] == causal["architecture"])]
    reps, grid = cell[cell["treatment"].notna()], cell[cell["treatment"].isna()]
    metrics = [c for c in summary.columns if c == "test_acc" or
               (c.startswith("robust_acc_eps") and c.count("_") == 2) or
               c.endswith(("_attacc1", "_dist_face"))]
    rows = []
    for arm, defense in ((1, causal.get("treatment", "atat")), (0, causal.get("control", "nodef"))):
        part = reps[reps["treatment"] == arm]
        ref = grid[grid["defense"] == defense]
        for m in metrics:
            v = part[m].dropna()
            if v.empty:
                continue
            rows.append({"arm": "treatment" if arm else "control", "defense": defense,
                         "metric": m, "n_seeds": len(v), "mean": v.mean(),
                         "sd": v.std(ddof=1) if len(v) > 1 else np.nan, "min": v.min(),
                         "max": v.max(), "grid_model": ref[m].iloc[0] if len(ref) and
                         m in ref else np.nan})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------ the rule
def _read(path: str | Path | None) -> pd.DataFrame | None:
    return None if not path else pd.read_csv(path)


def _prior_sentence(inp: Inputs) -> str:
    """What the caption says of the attackers' priors: each prior's quality precondition (rows
    ``generators/<name>`` of the preconditions table), so a failed prior of one population
    (e.g. the demo's dogs) is not read as the prior of every claim."""
    from atat.preconditions import PRIOR

    pc = inp.preconditions
    rows = None if pc is None or pc.empty else pc[pc["experiment"] == PRIOR]
    if rows is None or rows.empty:
        ok, why = inp.precondition(PRIOR)
        return ("Every privacy number comes from inversions with the attacker's prior, whose "
                f"quality precondition {why}.")
    parts, failed_any = [], False
    for model, group in rows.groupby("model", sort=True):
        name = str(model).split("/", 1)[-1]
        failed = group.loc[group["passed"].astype(str).str.lower().isin(["false", "0"]),
                           "check"].drop_duplicates().tolist()
        checked = group["passed"].astype(str).str.lower().isin(["true", "1", "false", "0"]).any()
        failed_any |= bool(failed)
        parts.append(f"{name} " + ("failed: " + ", ".join(failed) if failed
                                   else "passed" if checked else "not measured"))
    return ("The privacy numbers come from inversions with the attackers' priors, whose quality "
            "preconditions: " + "; ".join(parts)
            + (" (where a prior failed, its population's reconstructions are weaker than the "
               "paper's: AttAcc@1 differences are measured, but with a worse attacker)"
               if failed_any else "") + ".")


def claims_table(config: Mapping[str, Any], *, summary_csv: str | Path, per_image_csv: str | Path,
                 outputs: Sequence[str | Path], regressions_csv: str | Path | None = None,
                 cost_csv: str | Path | None = None,
                 hsic_files: Mapping[str, str | Path] | None = None,
                 preconditions_csv: str | Path | None = None,
                 dose_csv: str | Path | None = None) -> pd.DataFrame:
    """Write results/tables/claims.{csv,md} and, with a causal experiment in the summary,
    results/tables/seed_variation.{csv,md} (``outputs``: those paths, by name)."""
    from atat.stats.causal import causal_table
    from atat.stats.regression import causal_sample
    from atat.tables import main_results, to_markdown

    summary = pd.read_csv(summary_csv)
    per_image = pd.read_csv(per_image_csv)
    causal = None
    if "treatment" in summary and summary["treatment"].notna().any():
        causal = causal_table(summary, sample=causal_sample(config.get("causal")))
    inp = Inputs(config=config, summary=summary, main=main_results(per_image, summary),
                 per_image=per_image, tidy=_read(regressions_csv), causal=causal,
                 cost=_read(cost_csv),
                 hsic={d: io.read_json(p) for d, p in (hsic_files or {}).items()},
                 preconditions=_read(preconditions_csv),
                 dose=_read(dose_csv), dataset=claims_cell(config)[0],
                 architecture=claims_cell(config)[1])
    table = build_claims(inp)
    counts = table["verdict"].value_counts()
    caption = (f"The paper's claims against this run ({inp.dataset} / {inp.architecture} for "
               "the per-cell claims; §6's AT-AT claims also in every other cell where AT-AT "
               "was attacked): " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS)
               + ". Verdicts from 95% intervals (atat.claims). " + _prior_sentence(inp))
    seeds = seed_variation(summary, config)
    seeds_caption = ("How much the numbers move with the seed: the causal experiment's "
                     "replicates (same cell and recipe, other seeds) per arm, next to the grid's "
                     "first-seed model of the variant.")
    by_name = {Path(p).name: Path(p) for p in outputs}
    for name, frame, cap in (("claims", table, caption), ("seed_variation", seeds, seeds_caption)):
        if f"{name}.csv" not in by_name:
            continue
        with io.atomic_path(by_name[f"{name}.csv"]) as tmp:
            frame.to_csv(tmp, index=False)
        if f"{name}.md" in by_name:
            io.write_text(by_name[f"{name}.md"], to_markdown(frame, cap) if len(frame) else
                          cap + "\n\n(no causal experiment in this run)\n")
    return table
