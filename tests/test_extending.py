"""docs/extending.md holds: its worked example -- a new defense -- is taken from the page's own
code blocks and carried out, so the page cannot drift from what works.

* Fast: the blocks are on the page; the defense of the page trains, is validated by name and
  loads back when registered in this process (``REGISTRY`` patched for the test, the page's
  step 2 done in memory); tables label a variant by its type; the overlay
  ``config/overlays/one-defense.yaml`` plans one defense beside its comparison baselines
  (a dry run of the paper config).
* Slow (marker ``slow``): the page's steps on a copy of the checkout -- its tracked and
  not-ignored files (src, workflow, config, tests, docs, ...) copied to a temporary folder, the
  defense file written there, the registry entry, the config variant and the two documentation
  rows inserted where the page says -- then the copy's own ``tests/test_docs.py`` checks
  the rows (failing before they are added, passing after), Snakemake runs the tiny config with
  the page's overlay from the copy's Snakefile until Table 4 has the new defense's row, and a
  dry run of the one-defense overlay with the new variant as its last name plans it beside
  the baselines. A copy rather than the repository itself: registering a defense means
  editing the package, and the test must never edit the checkout. Inserting the registry
  line is the one step done by pattern (after the last defense import, into the tuple
  ``REGISTRY`` is built from): if that file is reorganised, this test fails and the page's
  step 2 must be rewritten with it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "extending.md"
ONE_DEFENSE = ROOT / "config" / "overlays" / "one-defense.yaml"


# ----------------------------------------------------------------------------- the page
def guide_blocks() -> dict[str, tuple[str, str]]:
    """The page's named code blocks: name -> (language, body). A block's name is the word
    after its language (```` ```yaml variant ````; ``file=<path>`` names it by its path)."""
    text = GUIDE.read_text(encoding="utf-8")
    out = {}
    for lang, name, body in re.findall(r"^```(\w+) (\S+)\n(.*?)^```", text, flags=re.M | re.S):
        out[name] = (lang, body)
    return out


def defense_block() -> tuple[str, str]:
    """(path in the repository, source) of the page's defense module."""
    [(name, (_, body))] = [(k, v) for k, v in guide_blocks().items() if k.startswith("file=")]
    return name.removeprefix("file="), body


def registry_lines() -> tuple[str, str]:
    """The import line and the class name of the page's registry step."""
    body = guide_blocks()["registry"][1]
    [imp] = [line for line in body.splitlines() if line.startswith("from ")]
    cls = re.search(r",\s*(\w+)\)\s*$", body.split("for cls in (")[1].split("}")[0].strip())
    assert cls, "the registry block must end its tuple with the new class"
    return imp, cls.group(1)


def variant() -> dict:
    return yaml.safe_load("defenses:\n" + guide_blocks()["variant"][1])["defenses"]


def test_the_page_has_every_block_the_test_carries_out():
    blocks = guide_blocks()
    assert {"registry", "variant", "readme-row", "code-row", "tiny-overlay"} <= set(blocks)
    path, source = defense_block()
    compile(source, path, "exec")
    imp, cls = registry_lines()
    module = path.removesuffix(".py").replace("/", ".").removeprefix("src.")
    assert imp == f"from {module} import {cls}" and f"class {cls}(" in source
    [name] = variant()
    type_name = re.search(r'type_name = "(\w+)"', source).group(1)
    assert variant()[name]["type"] == type_name
    assert blocks["readme-row"][1].startswith(f"| `{type_name}` |")
    assert blocks["code-row"][1].startswith(f"| `{module.removeprefix('src.')}` |")
    assert name in yaml.safe_load(blocks["tiny-overlay"][1])["grid"][0]["defenses"]


# ----------------------------------------------------------------------------- in process
@pytest.fixture
def guide_defense(monkeypatch):
    """The page's defense class, registered for this test only (step 2 in memory)."""
    from atat.training import defenses

    path, source = defense_block()
    module = types.ModuleType("guide_defense")
    exec(compile(source, path, "exec"), module.__dict__)
    _, cls_name = registry_lines()
    cls = module.__dict__[cls_name]
    monkeypatch.setitem(defenses.REGISTRY, cls.type_name, cls)
    return cls


def test_the_pages_defense_is_validated_by_name(guide_defense, tmp_path):
    from atat.plan.config import ConfigError, load_config, validate_config

    [(name, spec)] = variant().items()
    tiny = yaml.safe_load((ROOT / ".test" / "tiny" / "config.yaml").read_text())

    def config(spec):
        overlay = tmp_path / "overlay.yaml"
        overlay.write_text(yaml.safe_dump({
            "defenses": {name: spec},
            "grid": [{**tiny["grid"][0], "defenses": ["nodef", "atat", name]}]}))
        return load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml",
                           ROOT / ".test" / "tiny" / "config.yaml", overlay)

    validate_config(config(spec))
    with pytest.raises(ConfigError, match=rf"defenses\.{name}\.sigma: invalid value -1"):
        validate_config(config({**spec, "sigma": -1}))
    with pytest.raises(ConfigError, match=rf"defenses\.{name}: unknown parameter\(s\) \['sigmaa'\]"):
        validate_config(config({"type": spec["type"], "sigmaa": 0.1}))


def test_the_pages_defense_trains_and_loads_back(guide_defense, tmp_path, tiny_recipe,
                                                  make_synthfaces):
    import numpy as np
    import torch

    from atat.training.train import TrainSpec, load_model, train

    [(name, spec)] = variant().items()
    root = make_synthfaces(tmp_path / "ds")

    def run(defense, out):
        s = TrainSpec(model_id=f"test/resnet18/{name}/seed0", dataset_root=str(root),
                      resolution=16, n_classes=4, architecture="resnet18", defense=defense,
                      training=tiny_recipe(), augmentation={"random_resized_crop": False,
                                                            "horizontal_flip": False,
                                                            "color_jitter": False}, seed=0)
        return train(s, out_model=out / "m.pt", out_metrics=out / "m.json",
                     resume_path=out / "r.pt", progress=False)

    metrics = run(spec, tmp_path / "a")
    assert np.isfinite(metrics["history"][0]["train_loss"]) and np.isfinite(metrics["test_loss"])
    model, defense, _ = load_model(tmp_path / "a" / "m.pt")
    assert type(defense) is guide_defense and defense.params == {"sigma": spec["sigma"]}
    # training only: the same seed without noise trains other weights; the model is queried
    # without noise (evaluation is deterministic)
    run({**spec, "sigma": 0.0}, tmp_path / "b")
    quiet, _, _ = load_model(tmp_path / "b" / "m.pt")
    assert any(not torch.equal(p, q) for p, q in zip(model.state_dict().values(),
                                                    quiet.state_dict().values()))
    x = torch.rand(2, 3, 16, 16) * 2 - 1
    with torch.no_grad():
        assert torch.equal(defense.logits(model, x), defense.logits(model, x))


# ----------------------------------------------------------------------------- labels
def test_a_variant_the_paper_lacks_is_labelled_by_its_type(tmp_path):
    from atat.analysis import tables
    from atat.analysis.paper import DEFENSE_LABELS, defense_types, type_label

    types_ = {"nodef": "nodef", "mid_b2": "mid", "noise_input": "noise_input",
              "noise_low": "noise_input", "unseen_pixels_x": "pixel_mask", "bido_lx1e3": "bido"}
    labels = DEFENSE_LABELS.with_types(types_)
    assert labels["nodef"] == "NoDef" and labels["bido_lx1e3"] == "BiDO(.001,0)"  # the paper's
    assert labels["mid_b2"] == "MID (mid_b2)"                 # a new variant of a known type
    assert labels["noise_input"] == "Noise input"             # a new type: a readable default
    assert labels["noise_low"] == "Noise input (noise_low)"
    assert labels["unseen_pixels_x"] == "Unseen-Pixels (unseen_pixels_x)"
    assert labels.get("atat_w0p5") == "AT-AT (\u03bb = 0.5)"  # generated variants unchanged
    assert "mid_b2" not in DEFENSE_LABELS and type_label("trap_mid") == "Trap-MID"
    assert defense_types(None, config={"defenses": {"x": {"type": "mid"}}}) == {"x": "mid"}
    # in a table: the rows of results/summary.csv carry defense_type
    rows = [{"dataset": "facescrub", "architecture": "resnet152", "defense": d,
             "defense_type": t, "seed": 0, "treatment": None, "aa_clean_acc_eps0.031": 0.9,
             "robust_acc_eps0.031": 0.1, "aa_n_examples_eps0.031": 8}
            for d, t in types_.items()]
    path = tmp_path / "summary.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    table = tables.robustness_table(path, [tmp_path / "t11.csv"], eps=0.031)
    assert list(table["Defense"]) == [labels[d] for d in types_]


# ----------------------------------------------------------------------------- the overlay
def test_the_one_defense_overlay_plans_one_defense_beside_its_baselines():
    from collections import Counter

    from atat.analysis.paper import BASELINE_TYPES, final_targets
    from atat.lab import target_cones as tc

    overlay = yaml.safe_load(ONE_DEFENSE.read_text())
    [cell] = overlay["grid"]
    assert cell["defenses"][-1] == "tldmi5"    # the defense under test, as the header says
    assert {"nodef", "atat", *BASELINE_TYPES} == set(cell["defenses"][:-1])
    dag = tc.build_dag([ROOT / "config" / "config.yaml", ONE_DEFENSE])
    by_rule = Counter(rule for rule, _ in dag.deps)
    trained = sorted(files[0].split("/")[4] for rule, files in dag.deps if rule == "train_model")
    assert trained == sorted(cell["defenses"])
    assert by_rule["train_model"] == 10 and by_rule["autoattack"] == 40
    assert by_rule["invert"] == 30 and sum(by_rule.values()) == 440
    targets = final_targets(tc.plan_of(dag))
    for table in ("table4", "table11", "table14", "table23", "table27"):
        assert f"results/tables/{table}.md" in targets, table


# ----------------------------------------------------------------------------- end to end
def _copy_checkout(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _docs_tests(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(repo / "tests" / "test_docs.py"), "-k",
         "defense_type_and_parameter or module_table_lists_every_module"],
        cwd=repo, capture_output=True, text=True, timeout=600)


def _insert_after_last(text: str, prefix: str, line: str) -> str:
    lines = text.splitlines(keepends=True)
    last = max(i for i, s in enumerate(lines) if s.startswith(prefix))
    return "".join(lines[:last + 1] + [line + "\n"] + lines[last + 1:])


@pytest.mark.slow
def test_the_pages_steps_end_to_end(tmp_path):
    repo = tmp_path / "repo"
    _copy_checkout(repo)
    blocks = guide_blocks()
    # 1. the module
    path, source = defense_block()
    (repo / path).write_text(source)
    # 2. the registry entry: the import after the last defense import, the class into the tuple
    imp, cls = registry_lines()
    init = repo / "src" / "atat" / "training" / "defenses" / "__init__.py"
    text = _insert_after_last(init.read_text(), "from atat.training.defenses.", imp)
    text, n = re.subn(r"(for cls in \((?:[^()]*)?)\)", rf"\1, {cls})", text, count=1)
    assert n == 1, "the registry's tuple was not found: rewrite step 2 of docs/extending.md"
    init.write_text(text)
    # 3. the variant under `defenses:` of config/config.yaml
    cfg = repo / "config" / "config.yaml"
    text = cfg.read_text()
    head, sep, rest = text.partition("\ndefenses:")
    first_line, nl, body = rest.partition("\n")
    cfg.write_text(head + sep + first_line + nl + blocks["variant"][1] + body)
    [(name, spec)] = variant().items()
    assert yaml.safe_load(cfg.read_text())["defenses"][name] == spec
    # 4. the documentation tests fail without the two rows, naming the new type and module,
    # and name them no more with the rows (another module's missing row fails them all the same)
    failing = _docs_tests(repo)
    assert failing.returncode != 0, failing.stdout[-2000:]
    assert f"'{name}'" in failing.stdout and f"'atat.training.defenses.{name}'" in failing.stdout
    readme = repo / "config" / "README.md"
    readme.write_text(_insert_after_last(readme.read_text(), "| `pixel_mask` |",
                                         blocks["readme-row"][1].rstrip("\n")))
    code_md = repo / "docs" / "code.md"
    code_md.write_text(_insert_after_last(code_md.read_text(),
                                          "| `atat.training.defenses.",
                                          blocks["code-row"][1].rstrip("\n")))
    passing = _docs_tests(repo)
    assert name not in passing.stdout, passing.stdout[-3000:]
    # 6. the tiny config with the page's overlay, from the copy's Snakefile, until Table 4
    run = tmp_path / "run"
    run.mkdir()
    (run / "tiny-overlay.yaml").write_text(blocks["tiny-overlay"][1])
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "--directory",
           str(run), "--configfile", str(repo / "config" / "demo.yaml"),
           str(repo / ".test" / "tiny" / "config.yaml"), str(run / "tiny-overlay.yaml"),
           "--cores", "2", "--set-threads", "train_model=1", "autoattack=1", "--",
           "results/tables/table4.md"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = pd.read_csv(run / "results" / "tables" / "table4.csv")
    assert list(table["Defense"]) == ["NoDef", "AT-AT", "Noise input"]
    assert table.filter(like="Acc").notna().all().all()
    model = run / "results" / "models" / "synthfaces" / "resnet18" / name / "seed0"
    assert (model / "model.pt").is_file()
    # the paper overlay with the new variant as its last name (the page's "copy, replace")
    mine = tmp_path / "my-defense.yaml"
    mine.write_text(ONE_DEFENSE.read_text().replace(", atat, tldmi5]", f", atat, {name}]"))
    dry = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-s", str(repo / "Snakefile"), "--directory",
         str(tmp_path / "dry"), "--configfile", str(mine), "--quiet", "rules", "--", "all"],
        capture_output=True, text=True, timeout=900)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", dry.stdout, flags=re.M))
    assert counts["train_model"] == "10" and counts["autoattack"] == "40", dry.stdout[-2000:]
