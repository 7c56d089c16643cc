"""The docs match the code (issue 15 item 8, issue 44 item 6): ``config/README.md`` describes
every config section and key family, ``workflow/report/workflow.rst`` lists every stage and
rule of the DAG, ``docs/code.md`` lists every module of ``src/atat`` and the README's layout
table every top-level folder; the README, ``config/README.md`` and ``docs/*.md`` name only
``make`` targets the Makefile has and files the repository has, their links land on existing
files and headings, and the README's headline repeats the quoted run's verdict counts."""

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
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CODE_MD = DOCS / "code.md"
MINIATURE_MD = DOCS / "miniature.md"
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


def layout_table(readme: str, heading: str = "## Layout") -> str:
    """The first table of the ``heading`` section (its lines starting with '|')."""
    section = readme[readme.index(f"\n{heading}\n"):]
    lines = section.splitlines()[2:]
    table = []
    for line in lines:
        if not line.startswith("|"):
            if table:
                break
            continue
        table.append(line)
    assert table, f"the {heading} section has no table"
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
    ones and the one-per-table rules its loops generate from the registry (atat.analysis.paper)."""
    from atat.analysis import paper

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
    from atat.training.defenses import REGISTRY

    text = CONFIG_README.read_text()
    missing = [t for t in REGISTRY if f"| `{t}` |" not in text]
    missing += [f"{t}.{p}" for t, cls in REGISTRY.items() for p in cls.PARAMS
                if f"`{p}`" not in text]
    assert not missing, f"defense types/parameters {missing} are not in config/README.md"


def test_every_regressions_key_is_described_in_config_readme():
    from atat.analysis.stats.regression import DEFAULTS, REGSET_KEYS, SAMPLE_KEYS

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

    from atat.plan.config import load_config

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


# ----------------------------------------------------------------------------- layout
def test_code_md_module_table_lists_every_module_of_the_package():
    table = layout_table(CODE_MD.read_text(), "## Modules")
    modules = _modules()
    assert "atat.plan.config" in modules and "atat.data.builders.celeba" in modules
    missing = [m for m in modules if f"| `{m}` |" not in table]
    assert not missing, f"docs/code.md's module table lacks the modules {missing}"
    stale = sorted(set(re.findall(r"^\| `(atat(?:\.\w+)+)` \|", table, flags=re.M))
                   - set(modules))
    assert not stale, f"docs/code.md's module table lists modules that do not exist: {stale}"


def test_readme_layout_table_lists_every_top_level_folder():
    table = layout_table(README.read_text())
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


# ----------------------------------------------------------------------------- README and docs/
def doc_pages() -> list[Path]:
    """The pages a user reads: the README, config/README.md, every page of docs/ and the
    changelog."""
    return [README, CONFIG_README, *sorted(DOCS.glob("*.md")), ROOT / "CHANGELOG.md"]


def code_spans(markdown: str) -> list[str]:
    """The text of every fenced code block and inline code span (where commands and paths are
    written; prose such as 'make sure' is not)."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.M | re.S)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", markdown, flags=re.M | re.S)
    return fenced + re.findall(r"`([^`\n]+)`", rest)


def make_targets_named(markdown: str) -> set[str]:
    return {m for span in code_spans(markdown) for m in re.findall(r"(?<![\w-])make ([a-z][\w-]*)", span)}


def makefile_targets(makefile: str) -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w.-]*)[ \t]*:(?!=)", makefile, flags=re.M))


#: repository paths as the docs write them (runtime folders such as results/ are not checked)
_PATH = re.compile(r"(?<![\w./-])((?:src|config|workflow|tests|docs|profiles|envs|data|\.ci|\.test)"
                   r"/[\w./-]*|Snakefile|Makefile|pyproject\.toml|LICENSE|CHANGELOG\.md)")


def repository_paths_named(markdown: str) -> set[str]:
    """Paths of the repository named in code spans, without placeholders (<…>, *, {…})."""
    out = set()
    for span in code_spans(markdown):
        for path in _PATH.findall(span):
            path = path.rstrip(".,:;")
            if not re.search(r"[<>*{}…]|\.\.\.", span[span.find(path):span.find(path) + len(path) + 1]):
                out.add(path)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def heading_anchors(markdown: str) -> set[str]:
    out: set[str] = set()
    seen: dict[str, int] = {}
    text = re.sub(r"^```[^\n]*\n.*?^```", "", markdown, flags=re.M | re.S)
    for heading in re.findall(r"^#{1,6}\s+(.*)$", text, flags=re.M):
        base = slug(heading)
        out.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return out


def broken_links(page: Path, markdown: str) -> list[str]:
    """Relative links of ``markdown`` (read from ``page``) to a missing file or heading."""
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", markdown):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if path and not file.exists():
            bad.append(f"{page.name}: ({target}): no such file")
        elif anchor and file.suffix == ".md":
            text = markdown if file == page else file.read_text(encoding="utf-8")
            if anchor not in heading_anchors(text):
                bad.append(f"{page.name}: ({target}): no heading with that anchor")
    return bad


def test_the_docs_name_only_make_targets_the_makefile_has():
    targets = makefile_targets((ROOT / "Makefile").read_text())
    assert {"demo", "test", "test-all", "bench"} <= targets
    missing = {f"{p.relative_to(ROOT)}: make {t}" for p in doc_pages()
               for t in make_targets_named(p.read_text(encoding="utf-8")) if t not in targets}
    assert not missing, f"the docs name make targets the Makefile lacks: {sorted(missing)}"


def test_the_docs_name_only_files_the_repository_has():
    # docs/sources.md names files of the origin repositories (the authors' code, Snakemake's
    # conventions), not of this one
    pages = [p for p in doc_pages() if p.name != "sources.md"]
    named = {(p, f) for p in pages for f in repository_paths_named(p.read_text("utf-8"))}
    assert len(named) > 30
    missing = sorted(f"{p.relative_to(ROOT)}: {f}" for p, f in named if not (ROOT / f).exists())
    assert not missing, f"the docs name files that do not exist: {missing}"


def test_the_docs_links_land_on_files_and_headings():
    bad = [b for p in doc_pages() for b in broken_links(p, p.read_text(encoding="utf-8"))]
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_the_docs_are_pages_of_one_question_each():
    """The README is a user's page (issue 44: at most 250 lines, the quick check and the
    cluster run before the results); the lab notebook lives in docs/."""
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250, "README.md: more than 250 lines; move detail to docs/"
    order = [readme.index(h) for h in ("\n## Two commands", "make smoke", "snakemake --profile slurm all",
                                       "\n## Outputs", "\n## The miniature's results",
                                       "\n## Known limits", "\n## Layout")]
    assert order == sorted(order)
    for page in ("miniature", "measurements", "decisions", "running", "code"):
        assert f"(docs/{page}.md" in readme, f"README.md does not link docs/{page}.md"


def test_the_readme_headline_repeats_the_quoted_runs_verdicts():
    """The README's headline numbers are a quoted run's files': the verdict counts and the
    preconditions' count of the claims and preconditions tables, as docs/miniature.md's blocks
    (refreshed by `make readme-tables`) or docs/power.md (the run its design was decided from)
    quote them; a headline that no page quotes fails."""
    pages = {p: p.read_text(encoding="utf-8") for p in (MINIATURE_MD, ROOT / "docs" / "power.md")}
    readme = README.read_text(encoding="utf-8")
    verdicts = (r"(\d+) supported, (\d+) smaller than the paper's, (\d+) contradicted, "
                r"(\d+) too weak to say, (?:(\d+) too weak to say \(undecidable by design\), )?"
                r"(\d+) premise not met, (\d+) not testable(?:, (\d+) not in the paper's regime)?")
    head = re.search(verdicts, " ".join(readme.split()))
    assert head, "README.md: no verdict counts in the headline"
    quoted = [p for p, text in pages.items() if head.group(0) in " ".join(text.split())]
    assert quoted, f"README.md's verdict counts '{head.group(0)}' are quoted by no docs page"
    checks = re.search(r"(\d+) of (\d+) checks passed", " ".join(pages[quoted[0]].split()))
    assert checks and f"{checks[1]} of {checks[2]} checks pass" in readme


def test_the_doc_checks_see_what_is_wrong():
    # each check above can fail: a missing target, a missing file, a broken link
    assert make_targets_named("run `make sure` as\n```\nmake demo\n```\nmake sure") == {"sure", "demo"}
    assert make_targets_named("make sure nothing runs") == set()
    assert make_targets_named("`snakemake all  # re-make two outputs`") == set()
    assert makefile_targets("demo: venv\n\tx\nPYTHON ?= p\nA := b\n") == {"demo"}
    assert repository_paths_named("`src/atat/nope.py`, `results/x`, `config/<name>.yaml`") \
        == {"src/atat/nope.py"}
    page = DOCS / "x.md"
    assert broken_links(page, "[a](nope.md) [b](code.md#nope) [c](#here) [d](https://x)\n# Here") \
        == ["x.md: (nope.md): no such file", "x.md: (code.md#nope): no heading with that anchor"]
    assert slug("The test split: 60 → 1,260 images") == "the-test-split-60--1260-images"
    assert heading_anchors("# A\n## A\n```\n# not\n```\n") == {"a", "a-1"}


def test_the_configs_links_to_the_docs_land_on_headings():
    """config/*.yaml and config/overlays/*.yaml comments name the page and heading that
    explains a setting (``docs/decisions.md#at-at``); each one exists."""
    files = [*sorted((ROOT / "config").glob("*.yaml")),
             *sorted((ROOT / "config" / "overlays").glob("*.yaml"))]
    cited = [(str(path.relative_to(ROOT / "config")), page, anchor) for path in files
             for page, anchor in re.findall(r"\b(?:docs/)?(\w+)\.md#([\w-]+)", path.read_text())]
    assert any(name.startswith("overlays/") for name, _, _ in cited)
    assert any(page == "decisions" for _, page, _ in cited)
    bad = [f"config/{name}: docs/{page}.md#{anchor}" for name, page, anchor in cited
           if not (DOCS / f"{page}.md").exists()
           or anchor not in heading_anchors((DOCS / f"{page}.md").read_text(encoding="utf-8"))]
    assert not bad, f"config comments link headings that do not exist: {bad}"
