"""The docs match the code (issue 15 item 8): ``config/README.md`` describes every config
section and key family, ``workflow/report/workflow.rst`` lists every stage and rule of the
DAG, and the README's layout table lists every module of ``src/atat`` and every top-level
folder."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG_README = ROOT / "config" / "README.md"
WORKFLOW_RST = ROOT / "workflow" / "report" / "workflow.rst"
RULES_DIR = ROOT / "workflow" / "rules"
PACKAGE = ROOT / "src" / "atat"
CONFIG_FILES = ["config.yaml", "demo.yaml", "regressions.yaml"]
#: folders that exist only at run time (ignored by git) and are documented all the same
RUNTIME_DIRS = ["results", "resources", "logs", "benchmarks"]


# ----------------------------------------------------------------------------- helpers
def _headings(markdown: str) -> str:
    return "\n".join(line for line in markdown.splitlines() if line.startswith("#"))


def _schema_keys(node: Any) -> Iterator[str]:
    """Every property name the config schema defines, at any depth."""
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            yield name
            yield from _schema_keys(sub)
        for key, sub in node.items():
            if key != "properties":
                yield from _schema_keys(sub)
    elif isinstance(node, list):
        for sub in node:
            yield from _schema_keys(sub)


def _modules() -> list[str]:
    """Dotted names of every module and package under src/atat (not atat itself)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 1:
            names.append(".".join(parts))
    return names


def layout_table(readme: str) -> str:
    """The table of the README's ``## Layout`` section (its lines starting with '|')."""
    section = readme[readme.index("\n## Layout\n"):]
    lines = section.splitlines()[2:]
    table = []
    for line in lines:
        if not line.startswith("|"):
            if table:
                break
            continue
        table.append(line)
    assert table, "README.md: the Layout section has no table"
    return "\n".join(table)


def _ignored_patterns() -> list[str]:
    out = []
    for line in (ROOT / ".gitignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            out.append(line.strip("/").split("/")[0])
    return out


def _top_level_dirs() -> list[str]:
    """Top-level folders of the checkout that are not local state git ignores."""
    ignored = _ignored_patterns() + [".git"]
    found = [p.name for p in ROOT.iterdir() if p.is_dir()
             and not any(fnmatch.fnmatch(p.name, pat) for pat in ignored)]
    return sorted(set(found) | set(RUNTIME_DIRS))


def _rules() -> dict[str, list[str]]:
    """Rules file name -> the rules it defines (and the Snakefile's own): the written-out
    ones and the one-per-table rules its loops generate from the registry (atat.paper)."""
    from atat import paper

    out = {}
    for path in sorted(RULES_DIR.glob("*.smk")) + [ROOT / "Snakefile"]:
        out[path.name] = re.findall(r"^rule (\w+):", path.read_text(), flags=re.M)
        out[path.name] += [o.rule for o in paper.REGISTRY
                           if o.family and f"{paper.TABLE_FAMILIES[o.family]}.smk" == path.name]
    return out


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize("name", CONFIG_FILES)
def test_every_top_level_config_key_has_a_section_in_config_readme(name):
    text = CONFIG_README.read_text()
    keys = yaml.safe_load((ROOT / "config" / name).read_text())
    if name == "regressions.yaml":  # its own section, one table row per top-level key
        section = text[text.index("## `config/regressions.yaml`"):]
        missing = [k for k in keys if f"\n| `{k}` |" not in section]
    else:  # a heading per section, in the part about config.yaml
        headings = _headings(text[:text.index("## `config/regressions.yaml`")])
        missing = [k for k in keys if f"`{k}`" not in headings]
    assert not missing, (f"config/{name}: top-level keys {missing} are not described in "
                         "config/README.md; describe them there")


def test_every_schema_section_and_key_is_described_in_config_readme():
    text = CONFIG_README.read_text()
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    headings = _headings(text)
    assert not [k for k in schema["properties"] if f"`{k}`" not in headings]
    missing = sorted({k for k in _schema_keys(schema) if f"`{k}`" not in text})
    assert not missing, f"schema keys {missing} are not described in config/README.md"


def test_every_defense_type_and_parameter_is_described_in_config_readme():
    from atat.defenses import REGISTRY

    text = CONFIG_README.read_text()
    missing = [t for t in REGISTRY if f"| `{t}` |" not in text]
    missing += [f"{t}.{p}" for t, cls in REGISTRY.items() for p in cls.PARAMS
                if f"`{p}`" not in text]
    assert not missing, f"defense types/parameters {missing} are not in config/README.md"


def test_every_regressions_key_is_described_in_config_readme():
    from atat.stats.regression import DEFAULTS, REGSET_KEYS, SAMPLE_KEYS

    text = CONFIG_README.read_text()
    regressions = yaml.safe_load((ROOT / "config" / "regressions.yaml").read_text())
    keys = list(regressions) + list(DEFAULTS) + list(SAMPLE_KEYS) + list(REGSET_KEYS)
    keys += [k for grid in regressions["grids"] for k in grid]
    missing = sorted({k for k in keys if f"`{k}`" not in text})
    assert not missing, f"config/regressions.yaml keys {missing} are not in config/README.md"


def test_the_doc_helpers_see_a_missing_key():
    # the checks above can fail: a key absent from the text is reported
    assert "`not_a_config_key`" not in CONFIG_README.read_text()
    assert "`split_seed`" in _headings(CONFIG_README.read_text())
    assert "offline" in set(_schema_keys({"properties": {"a": {"properties": {"offline": {}}}}}))


# ----------------------------------------------------------------------------- workflow.rst
def test_workflow_rst_names_every_rules_file_and_every_rule():
    text = WORKFLOW_RST.read_text()
    rules = _rules()
    assert len(rules) >= 10 and sum(map(len, rules.values())) >= 30
    missing_files = [f for f in rules if f != "Snakefile" and f"``{f}``" not in text]
    missing_rules = [r for f, names in rules.items() for r in names if f"``{r}``" not in text]
    assert not missing_files, f"workflow.rst does not name the rules files {missing_files}"
    assert not missing_rules, f"workflow.rst does not list the rules {missing_rules}"


def test_workflow_rst_lists_the_stages_in_dag_order():
    text = WORKFLOW_RST.read_text()
    stages = re.findall(r"^\d+\. \*\*([^*]+)\*\*", text, flags=re.M)
    assert stages == ["Data", "Target models", "AutoAttack", "HSIC",
                      "Evaluation networks and image prior", "Model inversion", "Summary",
                      "Tables", "Statistics", "Figures", "The paper's claims"]
    order = ["train_model", "autoattack", "measure_hsic", "train_evaluation_model", "invert",
             "summary", "table4", "regressions", "figure_robustness"]
    positions = [text.index(f"``{r}``") for r in order]
    assert positions == sorted(positions)


def _rst_items(text: str) -> dict[int, str]:
    """Number -> text of each item of workflow.rst's numbered stage list."""
    parts = re.split(r"^(\d+)\. ", text, flags=re.M)
    return {int(n): body for n, body in zip(parts[1::2], parts[2::2])}


def test_rules_files_stage_headers_agree_with_workflow_rst():
    """A rules file headed `# Stage N: ...` is named in item N of workflow.rst's list."""
    items = _rst_items(WORKFLOW_RST.read_text())
    headed = {}
    for path in sorted(RULES_DIR.glob("*.smk")):
        m = re.match(r"# Stage (\d+)\b", path.read_text())
        if m:
            headed[path.name] = int(m.group(1))
    wrong = {f: n for f, n in headed.items() if f"``{f}``" not in items.get(n, "")}
    assert not wrong, f"rules files whose '# Stage N' is not item N of workflow.rst: {wrong}"
    assert _rst_items("1. a\n   b\n2. c\n") == {1: "a\n   b\n", 2: "c\n"}


@pytest.mark.parametrize("overlay", [[], ["demo.yaml"]])
def test_workflow_rst_renders_without_errors(overlay):
    """As Snakemake's report does: Jinja with the config, then docutils (warnings fail)."""
    from docutils.core import publish_parts
    from jinja2 import Environment, StrictUndefined

    from atat.config import load_config

    config = load_config(*[ROOT / "config" / n for n in ["config.yaml", *overlay]])

    class Snakemake:
        pass

    Snakemake.config = config
    env = Environment(trim_blocks=True, lstrip_blocks=True, undefined=StrictUndefined)
    rendered = env.from_string(WORKFLOW_RST.read_text()).render(
        snakemake=Snakemake, categories={}, files=[])
    assert f"on\n{config['autoattack']['n_examples']} " in rendered.replace("   ", "")
    html = publish_parts(rendered, writer="html",
                         settings_overrides={"halt_level": 2, "report_level": 2})["html_body"]
    assert "AT-AT reproduction workflow" in html and html.count("<li>") == 11


# ----------------------------------------------------------------------------- README layout
def test_readme_layout_table_lists_every_module_of_the_package():
    table = layout_table((ROOT / "README.md").read_text())
    modules = _modules()
    assert "atat.config" in modules and "atat.data.builders.celeba" in modules
    missing = [m for m in modules if f"| `{m}` |" not in table]
    assert not missing, f"README.md layout table lacks the modules {missing}"
    stale = sorted(set(re.findall(r"^\| `(atat(?:\.\w+)+)` \|", table, flags=re.M))
                   - set(modules))
    assert not stale, f"README.md layout table lists modules that do not exist: {stale}"


def test_readme_layout_table_lists_every_top_level_folder():
    table = layout_table((ROOT / "README.md").read_text())
    dirs = _top_level_dirs()
    assert {"config", "workflow", "tests", "src", "results"} <= set(dirs)
    assert ".venv" not in dirs and ".git" not in dirs
    missing = [d for d in dirs if f"`{d}/" not in table]
    assert not missing, f"README.md layout table lacks the top-level folders {missing}"
    for name in ("Snakefile", "Makefile", "pyproject.toml"):
        assert f"`{name}`" in table


def test_layout_table_parser_stops_at_the_table():
    readme = "# x\n\n## Layout\n\n| a | b |\n|---|---|\n| `atat.x` | y |\n\ntext `atat.z`\n"
    assert layout_table(readme) == "| a | b |\n|---|---|\n| `atat.x` | y |"
