"""The per-rule conda environments (envs/*.yaml) without conda: every rule names one, the pins
agree with pyproject.toml, and each environment holds every third-party package that its rules'
scripts can import (the scripts' imports followed through the atat package, including imports
inside functions, against the requirement closure of the environment's packages)."""

from __future__ import annotations

import ast
import functools
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def rules() -> dict[str, dict[str, str]]:
    """rule name -> {'conda': env path, 'script': script path} from workflow/rules/*.smk."""
    out: dict[str, dict[str, str]] = {}
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        name, key = None, None
        for line in smk.read_text().splitlines():
            m = re.match(r"^(?:rule|checkpoint) (\w+):", line)
            if m:
                name, key = m.group(1), None
                out[name] = {}
                continue
            if line and not line[0].isspace():
                name = None
            if name is None:
                continue
            m = re.match(r"^    (\w+):\s*(.*)$", line)
            if m:
                key = m.group(1)
                if m.group(2).strip('"\''):
                    out[name][key] = m.group(2).strip().strip('"\'')
            elif key in ("conda", "script", "shell") and line.strip() and key not in out[name]:
                out[name][key] = line.split(" #")[0].strip().strip(",").strip('"\'')
    return out


def env_packages(env_file: Path) -> dict[str, str]:
    """pip packages of a conda env file -> pinned version ('' when unpinned)."""
    spec = yaml.safe_load(env_file.read_text())
    pips = [d for d in spec["dependencies"] if isinstance(d, dict) and "pip" in d]
    out = {}
    for p in (pips[0]["pip"] if pips else []):
        req = Requirement(p)
        pins = [s.version for s in req.specifier if s.operator == "=="]
        out[canonicalize_name(req.name)] = pins[0] if pins else ""
    return out


@functools.lru_cache(maxsize=None)
def closure(names: frozenset[str]) -> frozenset[str]:
    """The distributions ``names`` pull in (their requirements, recursively, without extras)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        n = canonicalize_name(todo.pop())
        if n in seen:
            continue
        seen.add(n)
        try:
            reqs = metadata.requires(n) or []
        except metadata.PackageNotFoundError:
            continue
        for r in map(Requirement, reqs):
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r.name)
    return frozenset(seen)


def imported_modules(path: Path) -> set[str]:
    """Every module named by an import anywhere in ``path`` (absolute names)."""
    tree = ast.parse(path.read_text())
    pkg: list[str] | None = None  # the package a relative import is relative to
    if SRC in path.parents:
        parts = path.relative_to(SRC).with_suffix("").parts
        pkg = list(parts[:-1])
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                assert pkg is not None, path
                base = ".".join(pkg[: len(pkg) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
                mods.add(mod)
                mods.update(f"{mod}.{a.name}" for a in node.names)  # submodules imported by name
            else:
                mods.add(node.module)
                mods.update(f"{node.module}.{a.name}" for a in node.names)
    return mods


def module_file(name: str) -> Path | None:
    base = SRC.joinpath(*name.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.exists():
            return cand
    return None


def third_party_imports(script: Path) -> set[str]:
    """Top-level third-party module names reachable from ``script`` through atat."""
    todo, seen, top = [script], set(), set()
    scripts = script.parent
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        for mod in imported_modules(f):
            head = mod.split(".")[0]
            if head == "atat":
                target = module_file(mod)
                if target is not None:
                    todo.append(target)
            elif head == "_common":
                todo.append(scripts / "_common.py")
            elif head not in sys.stdlib_module_names and head != "__future__":
                top.add(head)
    return top


@functools.lru_cache(maxsize=None)
def _distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()


RULES = rules()
PYPROJECT = {canonicalize_name(Requirement(r).name): Requirement(r)
             for r in __import__("tomllib").loads(
                 (ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}


def test_every_rule_names_an_existing_environment():
    assert len(RULES) >= 25
    for name, r in RULES.items():
        assert "conda" in r, f"rule {name} has no conda: directive"
        env = (ROOT / "workflow" / "rules" / r["conda"]).resolve()
        assert env.is_file() and env.parent == ROOT / "envs", (name, env)


@pytest.mark.parametrize("env", sorted(p.name for p in (ROOT / "envs").glob("*.yaml")))
def test_environment_pins_match_pyproject(env):
    spec = yaml.safe_load((ROOT / "envs" / env).read_text())
    assert "python=3.11" in spec["dependencies"]
    for name, version in env_packages(ROOT / "envs" / env).items():
        if name in PYPROJECT:
            assert version and version in PYPROJECT[name].specifier, (env, name, version)


@pytest.mark.parametrize("rule", sorted(n for n, r in RULES.items() if "script" in r))
def test_environment_holds_every_package_its_script_imports(rule):
    r = RULES[rule]
    script = (ROOT / "workflow" / "rules" / r["script"]).resolve()
    env = (ROOT / "workflow" / "rules" / r["conda"]).resolve()
    allowed = closure(frozenset(env_packages(env)))
    dists = _distributions()
    missing = {}
    for top in third_party_imports(script):
        owners = {canonicalize_name(d) for d in dists.get(top, [])}
        assert owners, f"{rule}: no installed distribution provides '{top}'"
        if not owners & allowed:
            missing[top] = sorted(owners)
    assert not missing, f"rule {rule} ({env.name}) imports packages its env lacks: {missing}"
