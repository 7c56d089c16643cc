"""Config validation memo (atat.plan.config_memo) and the DAG's imports staying free of torch."""

import subprocess
import sys
from pathlib import Path

import pytest

import atat.plan.config
from atat.plan import config_memo
from atat.plan.config import ConfigError, load_config
from atat.plan.config_memo import fingerprint, validate_config_once

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def calls(monkeypatch):
    seen = []

    def fake_validate(config):
        seen.append(config)
        if config.get("bad"):
            raise ConfigError("invalid configuration: bad: not allowed")

    monkeypatch.setattr(atat.plan.config, "validate_config", fake_validate)
    return seen


def test_validates_once_per_config(tmp_path, calls):
    assert validate_config_once({"a": 1}, tmp_path / "memo") is True
    assert validate_config_once({"a": 1}, tmp_path / "memo") is False
    assert len(calls) == 1
    assert validate_config_once({"a": 2}, tmp_path / "memo") is True  # another config: checked
    assert len(calls) == 2


def test_a_failed_validation_is_not_remembered(tmp_path, calls):
    for _ in range(2):
        with pytest.raises(ConfigError, match="bad: not allowed"):
            validate_config_once({"bad": True}, tmp_path / "memo")
    assert len(calls) == 2
    assert not (tmp_path / "memo").exists() or not list((tmp_path / "memo").iterdir())


def test_fingerprint_follows_the_code_and_the_config(tmp_path, monkeypatch):
    pkg = tmp_path / "src" / "atat"
    (pkg / "defenses").mkdir(parents=True)
    (pkg / "defenses" / "mid.py").write_text("PARAMS = {'beta': 1}\n")
    monkeypatch.setattr(config_memo, "PACKAGE_DIR", pkg)
    monkeypatch.setattr(config_memo, "SCHEMA_PATH", tmp_path / "schema.yaml")
    (tmp_path / "schema.yaml").write_text("type: object\n")
    before = fingerprint({"a": 1})
    assert fingerprint({"a": 1}) == before
    assert fingerprint({"a": 2}) != before
    (pkg / "defenses" / "mid.py").write_text("PARAMS = {'beta': 2}\n")
    assert fingerprint({"a": 1}) != before
    changed = fingerprint({"a": 1})
    (tmp_path / "schema.yaml").write_text("type: array\n")
    assert fingerprint({"a": 1}) != changed


def test_the_real_validation_runs_and_then_is_skipped(tmp_path):
    config = load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml")
    assert validate_config_once(config, tmp_path / "memo") is True
    assert validate_config_once(config, tmp_path / "memo") is False
    bad = load_config(ROOT / "config" / "config.yaml")
    bad["training"]["lr_milestones"] = [10_000]
    with pytest.raises(ConfigError, match="lr_milestones"):
        validate_config_once(bad, tmp_path / "memo")


def test_markers_are_pruned(tmp_path, calls, monkeypatch):
    monkeypatch.setattr(config_memo, "KEEP", 3)
    for i in range(6):
        validate_config_once({"i": i}, tmp_path / "memo")
    assert len(list((tmp_path / "memo").iterdir())) == 3


def _workflow_imports() -> list[str]:
    """Every ``import`` / ``from ... import`` statement of the Snakefile and the rule files,
    as written (the lines Snakemake runs while it parses the workflow)."""
    import re

    files = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
    text = "\n".join(p.read_text() for p in files)
    stmts = re.findall(r"^(?:from [\w.]+ import \([^)]*\)|from [\w.]+ import [^\n]+|import [^\n]+)",
                       text, re.M)
    return [re.sub(r"\s*#[^\n]*", "", s) for s in stmts]


def test_dag_time_modules_import_neither_torch_nor_statsmodels():
    """What the Snakefile and the rule files import while Snakemake parses the workflow (read
    from the files themselves, so a new import line is covered) must not pull in
    torch/torchvision (~3-5 s of every dry run) nor statsmodels/scipy.stats (~2 s)."""
    imports = [s for s in _workflow_imports() if "snakemake" not in s.split()[1]]
    assert any("atat.data.manifest" in s for s in imports), imports    # the parse is the real one
    code = ("import sys\n" + "\n".join(imports) + "\n"
            "print(sorted(m for m in ('torch', 'torchvision', 'statsmodels', 'scipy.stats') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "src")}, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_what_the_dag_calls_per_job_imports_no_torch():
    """The functions the rules call per job (a defense variant's parameters with its radii
    scaled, a job's cost for its runtime request) stay torch-free: on the paper config and on
    the demo with an epsilon_scale that scales AT-AT's radii from the defense's defaults."""
    code = (
        "import sys\n"
        "from atat.plan.config import load_config, defense_params, model_runs, with_dose_response\n"
        "from atat.plan.job_cost import job_cost_for\n"
        "for files, scale in ((['config/config.yaml'], None),\n"
        "                     (['config/config.yaml', 'config/demo.yaml'], 2.0)):\n"
        "    cfg = load_config(*files)\n"
        "    cfg.update(with_dose_response(cfg))\n"
        "    if scale:\n"
        "        cfg['epsilon_scale'] = {'factor': scale, 'derivation': 'a test'}\n"
        "    for r in model_runs(cfg):\n"
        "        defense_params(cfg, r.defense, (r.dataset, r.architecture))\n"
        "        wc = dict(dataset=r.dataset, arch=r.architecture, defense=r.defense, seed=r.seed)\n"
        "        job_cost_for('train_model', wc, cfg)\n"
        "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "src")}, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
