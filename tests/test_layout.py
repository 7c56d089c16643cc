"""The package's layout rule (README, *Layout*): src/atat is grouped by pipeline stage, and a
module imports only modules of its own stage or of the stages before it, in the order the
README gives; no two modules import each other, directly or through others; the workflow and
``import atat`` never load the lab tools."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def _stage_order() -> list[str]:
    """The stages in the order the README's layout section states them (one home for the rule)."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^Stage order: (.+)$", text, re.M)
    assert m, "README.md: the layout section states the rule as a line 'Stage order: `a` < `b` ...'"
    return re.findall(r"`(\w+)`", m.group(1))


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for p in (SRC / "atat").rglob("*.py"):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def _imports() -> dict[str, set[str]]:
    """Every import of an ``atat`` module, at any depth of the file (lazy imports count)."""
    mods = _modules()

    def known(name: str) -> str:
        while name not in mods:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, (path, is_pkg) in mods.items():
        package = m if is_pkg else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges[m] |= {known(a.name) for a in node.names if a.name.split(".")[0] == "atat"}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                if base.split(".")[0] != "atat":
                    continue
                for a in node.names:
                    full = f"{base}.{a.name}"
                    edges[m].add(full if full in mods else known(base))
        edges[m].discard(m)
    return edges


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "atat"


def test_src_atat_is_grouped_by_the_readme_stages():
    order = _stage_order()
    stages = {_stage(m) for m in _modules()} - {"atat"}
    assert stages == set(order), (f"stages in src/atat {sorted(stages)} differ from the README's "
                                  f"'Stage order' {order}")


def test_imports_run_one_way_down_the_stages():
    order = _stage_order()
    rank = {s: i for i, s in enumerate(order)}
    rank["atat"] = -1
    upward = sorted(f"{m} -> {d}" for m, ds in _imports().items() for d in ds
                    if rank[_stage(d)] > rank[_stage(m)])
    assert not upward, ("imports that run up the stage order (README, Layout): "
                        + "; ".join(upward))


def test_no_import_cycle_between_modules():
    edges = _imports()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_science_and_workflow_never_load_the_lab_tools():
    science = sorted(m for m in _modules() if not m.startswith("atat.lab"))
    code = ("import importlib, sys\n"
            "import atat\n"
            "assert not [m for m in sys.modules if m.startswith('atat.lab')], 'import atat'\n"
            f"for m in {science!r}:\n"
            "    importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.startswith('atat.lab')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "[]", f"science modules load lab tools: {out}"
    rules = [ROOT / "Snakefile", *sorted((ROOT / "workflow").rglob("*.smk")),
             *sorted((ROOT / "workflow").rglob("*.py"))]
    uses_lab = re.compile(r"\b(?:from|import)\s+atat\.lab\b|-m\s+atat\.lab\b")
    using = [str(p.relative_to(ROOT)) for p in rules if uses_lab.search(p.read_text())]
    assert not using, f"the workflow imports lab tools: {using}"
