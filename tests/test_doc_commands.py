"""Every command line the docs print works as printed.

The pages a user copies commands from -- README.md, config/README.md, docs/*.md (fenced code
blocks and inline code), the header comments of config/overlays/*.yaml and the comments of
envs/*.yaml -- print ``snakemake …`` and ``make …`` lines. This file extracts each one (a
line continued with ``\\`` is joined, a ``$`` prompt and a trailing ``# comment`` dropped, a
``srun <options>`` in front is stripped) and checks it:

* **Fast, every line** (:func:`snakemake_problems`): the line is parsed by Snakemake's own
  argument parser. A multi-valued option (``--configfile``, ``--config``, ``--logger``,
  ``--set-threads`` …) takes every following word up to the next option, so a target written
  after ``--configfile``'s files is read as one more config file (``FileNotFoundError: 'all'``):
  every ``--configfile`` value must be an existing config file, every ``--config`` value a
  ``key=value``, every ``--profile`` an existing profile folder, and no other multi-valued
  option may swallow a target. Put the targets first, or ``--configfile`` last.
* **Fast, every make line**: the target is one of the Makefile's, every ``VAR=value`` one the
  Makefile reads, every repository path in a value exists, and ``make -n`` of the line (with a
  throw-away ``VENV``) succeeds: nothing is built.
* **Slow, every distinct snakemake line** (marker ``slow``): run as printed, as a dry run
  (``-n``) in an empty working directory (``--directory``; its file arguments made absolute),
  the SLURM profile included: a dry run with the slurm executor submits nothing and calls none
  of ``sbatch``, ``sinfo``, ``sacct`` (it passes on a machine without them). It must exit 0, or
  fail as the page shows it failing (:data:`EXPECTED_FAILURES`).

What is not run as printed is said here, never skipped silently:

* a line with ``…`` is elided by its page (``snakemake … results/tables/table5.md``): its
  visible part is parsed, it is not run;
* a placeholder is replaced through :data:`SUBSTITUTIONS` (``<name>`` -> ``facescrub``); a
  placeholder without an entry fails the test;
* :data:`NOT_RUN` lists the few lines that are no command to dry-run (an option named in
  prose, the report of a finished run), with why;
* a line with ``--sdm conda`` is dry-run only where conda is installed (Snakemake calls
  ``conda info`` even in a dry run): elsewhere it is skipped, saying so.
"""

from __future__ import annotations

import functools
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from test_docs import _PATH, _rules, code_spans  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = ROOT / "Makefile"

#: The pilot line as docs/cluster.md, config/README.md and the overlay's header printed it at
#: f1b7780: `--configfile` takes `all` as a second config file.
PILOT_AT_F1B7780 = "snakemake --profile slurm --configfile config/overlays/pilot-cell.yaml all"

#: placeholder as printed -> what the test uses (whole words or <…> spans). ``{fixtures}`` is a
#: folder the tests create (:func:`fixtures`): an empty run directory, a profile of one's own,
#: the config file a page shows being written.
SUBSTITUTIONS = {
    "<name>": "facescrub",                      # resources/datasets/<name>.dataset.json
    "<file>": "results/tables/table4.md",       # snakemake -n --forceall <file>
    "<gpu partition>": "gpu",                   # srun -p <gpu partition> … (srun is stripped)
    "<run dir>": "{fixtures}/run",              # make readme-tables RUN=<run dir>
    "<dir>": "{fixtures}/run",                  # make power RUN=<dir>
    "<that run>": "{fixtures}/run",             # make power RUN=<that run>
    "mine": "{fixtures}/mine",                  # --profile mine: a profile of one's own
    "unsharded.yaml": "{fixtures}/unsharded.yaml",  # docs/forecast.md: one inversion job per attack
}
#: the files behind the substitutions
FIXTURE_FILES = {
    "mine/config.yaml": "jobs: 100\n",
    "unsharded.yaml": "inversion:\n  classes_per_job: {ppa: null, ifgmi: null, ppdg: null}\n",
    "run/.keep": "",
}

#: printed text -> why it is not a command to run
NOT_RUN = {
    "snakemake --report": "names the step of `make demo` that writes results/report.html",
    "snakemake -n": "names the dry-run option",
    "snakemake --report results/report.html --configfile config/demo.yaml":
        "the report of a finished run (make demo's last step): it reads that run's outputs",
}
#: options that need conda on the machine: such a line is dry-run only where conda is installed
CONDA_OPTIONS = ("--sdm conda", "--software-deployment-method conda", "--use-conda")

#: printed command -> the text its output must contain: the page shows it failing
EXPECTED_FAILURES = {
    "snakemake -n all --configfile unsharded.yaml --config max_runtime_min=2880":
        "would exceed the partition's limit max_runtime_min = 2880 min",
}

#: options whose values are rules or files (a target there is meant)
_RULE_OPTIONS = {"forcerun", "until", "omit_from", "allowed_rules", "prioritize"}
#: options whose values are `name=value`
_ASSIGN_OPTIONS = {"config", "set_threads", "set_resources", "set_scatter",
                   "set_resource_scopes", "default_resources", "resources", "envvars"}
_CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
_PROGRAM = re.compile(r"^(?:\S*/)?(snakemake|make)$")


# ----------------------------------------------------------------------------- extraction
@dataclass(frozen=True)
class Printed:
    """One printed command: where (``page:line``), the text as printed (continuations joined,
    prompt and trailing comment dropped), the program (``snakemake`` or ``make``)."""

    where: str
    text: str
    program: str

    @property
    def elided(self) -> bool:
        return "…" in self.text or "..." in self.text


def command_of(line: str) -> tuple[str, str] | None:
    """(program, command text) of one printed line, or None when the line is no snakemake or
    make command: its first word (after a ``$`` prompt and a ``srun <options>`` launcher) must be
    ``snakemake``, ``make`` or a path ending in them."""
    line = re.sub(r"\s+#\s.*$", "", line.strip())      # a trailing shell comment
    line = re.sub(r"^\$\s+", "", line)
    words = line.split()
    if words and words[0] == "srun":                    # srun -p <gpu partition> --gpus=1 make …
        rest = re.sub(r"<[^>]*>", "X", line).split()
        words = next((rest[i:] for i, w in enumerate(rest) if _PROGRAM.match(w)), [])
        line = " ".join(words)
    if not words:
        return None
    m = _PROGRAM.match(words[0])
    if not m:
        return None
    return m.group(1), line


def _join_continuations(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, text in lines:
        if pending is not None:
            number, text = pending[0], pending[1] + " " + text.strip()
            pending = None
        if text.rstrip().endswith("\\"):
            pending = (number, text.rstrip()[:-1].rstrip())
            continue
        out.append((number, text))
    if pending is not None:
        out.append(pending)
    return out


def commands_in_markdown(text: str, page: str) -> list[Printed]:
    """Commands of the fenced code blocks (line by line) and the inline code spans."""
    out = []
    for m in re.finditer(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S):
        first = text.count("\n", 0, m.start(1)) + 1
        lines = [(first + i, line) for i, line in enumerate(m.group(1).splitlines())]
        for number, line in _join_continuations(lines):
            found = command_of(line)
            if found:
                out.append(Printed(f"{page}:{number}", found[1], found[0]))
    rest = re.sub(r"^```[^\n]*\n.*?^```", lambda m: "\n" * m.group(0).count("\n"), text,
                  flags=re.M | re.S)
    for m in re.finditer(r"`([^`\n]+)`", rest):
        found = command_of(m.group(1))
        if found:
            out.append(Printed(f"{page}:{rest.count(chr(10), 0, m.start()) + 1}", found[1],
                               found[0]))
    return out


def commands_in_yaml_comments(text: str, page: str, header_only: bool) -> list[Printed]:
    """Commands in the comment lines of a YAML file (only the leading comment block with
    ``header_only``)."""
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.lstrip().startswith("#"):
            if header_only and line.strip():
                break
            continue
        lines.append((number, line.lstrip()[1:]))
    out = []
    for number, line in _join_continuations(lines):
        found = command_of(line)
        if found:
            out.append(Printed(f"{page}:{number}", found[1], found[0]))
    return out


def printed_commands() -> list[Printed]:
    """Every snakemake and make command the docs print."""
    pages = [ROOT / "README.md", ROOT / "config" / "README.md",
             *sorted((ROOT / "docs").glob("*.md"))]
    out = []
    for page in pages:
        out += commands_in_markdown(page.read_text(encoding="utf-8"),
                                    str(page.relative_to(ROOT)))
    for path in sorted((ROOT / "config" / "overlays").glob("*.yaml")):
        out += commands_in_yaml_comments(path.read_text(), str(path.relative_to(ROOT)), True)
    for path in sorted((ROOT / "envs").glob("*.yaml")):
        out += commands_in_yaml_comments(path.read_text(), str(path.relative_to(ROOT)), False)
    return out


COMMANDS = printed_commands()
#: command text -> every place that prints it
PLACES: dict[str, list[str]] = {}
for _c in COMMANDS:
    PLACES.setdefault(_c.text, []).append(_c.where)


def _distinct(program: str, runnable: bool = False) -> list[Printed]:
    seen: dict[str, Printed] = {}
    for c in COMMANDS:
        if c.program != program or c.text in seen:
            continue
        if runnable and (c.elided or c.text in NOT_RUN):
            continue
        seen[c.text] = c
    return list(seen.values())


# ----------------------------------------------------------------------------- substitutions
@pytest.fixture(scope="session")
def fixtures(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("doc-fixtures")
    for name, content in FIXTURE_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    return root


def substitute(text: str, fixtures: Path) -> str:
    """``text`` with every placeholder of :data:`SUBSTITUTIONS` replaced; an unknown ``<…>``
    placeholder is an error naming it."""
    for placeholder, value in SUBSTITUTIONS.items():
        value = value.format(fixtures=fixtures)
        if placeholder.startswith("<"):
            text = text.replace(placeholder, value)
        else:
            text = re.sub(rf"(?<![\w./-]){re.escape(placeholder)}(?![\w./-])", value, text)
    unknown = re.findall(r"<[^<>]+>", text)
    if unknown:
        raise AssertionError(f"placeholders {unknown} have no entry in SUBSTITUTIONS")
    return text


# ----------------------------------------------------------------------------- snakemake lines
@functools.cache
def _parser():
    from snakemake.cli import get_argument_parser

    return get_argument_parser()


@functools.cache
def _rule_names() -> frozenset[str]:
    return frozenset(r for names in _rules().values() for r in names)


def _is_target_word(word: str) -> bool:
    return word in _rule_names() or bool(re.match(r"(results|resources|logs)/", word))


def snakemake_problems(text: str, root: Path = ROOT) -> list[str]:
    """What is wrong with a printed snakemake command line, parsed as Snakemake parses it
    (empty: nothing). Paths are relative to ``root``; ``…`` (elided by the page) is dropped."""
    words = [w for w in shlex.split(text.replace("…", " ")) if w][1:]
    try:
        args = _parser().parse_args(words)
    except (SystemExit, ValueError) as exc:  # argparse's error; a type function's ValueError
        return [f"Snakemake's parser rejects it ({exc}): {text}"]
    problems = []
    multi = {a.dest: a for a in _parser()._actions if a.nargs in ("+", "*") and a.option_strings}
    for dest, action in multi.items():
        values = getattr(args, dest, None)
        if not values or dest in _RULE_OPTIONS or action.choices:
            continue   # choices: the parser checked them
        values = [str(v) for v in values]
        flag = action.option_strings[0]
        if dest == "configfile":
            bad = [v for v in values if not v.endswith(_CONFIG_SUFFIXES)
                   or not (root / v).is_file()]
        elif dest in _ASSIGN_OPTIONS:
            bad = [v for v in values if "=" not in v]
        else:
            bad = [v for v in values if _is_target_word(v)]
        if bad:
            problems.append(f"{flag} takes {bad} as its values (put the targets before {flag}, "
                            f"or {flag} last): {text}")
    for profile in args.profile or []:
        if not (root / str(profile)).is_dir():
            problems.append(f"--profile {profile}: no such profile folder: {text}")
    return problems


def test_the_checker_rejects_the_pilot_line_as_printed_at_f1b7780():
    problems = snakemake_problems(PILOT_AT_F1B7780)
    assert len(problems) == 1 and "--configfile takes ['all']" in problems[0], problems
    assert snakemake_problems(
        "snakemake all --profile slurm --configfile config/overlays/pilot-cell.yaml") == []


@pytest.mark.parametrize("text, wrong", [
    ("snakemake --configfile config/demo.yaml results/tables/table4.md", "--configfile"),
    ("snakemake --configfile config/nope.yaml all", "--configfile"),
    ("snakemake all --config max_runtime_min=1 results/tables/table4.md", "--config"),
    ("snakemake --profile slurm --logger rich all", "parser rejects"),
    ("snakemake --profile nowhere all", "no such profile"),
    ("snakemake --set-threads train_model=1 all", "parser rejects"),
])
def test_the_checker_sees_a_swallowed_target_or_a_missing_file(text, wrong):
    problems = snakemake_problems(text)
    assert problems and wrong in problems[0], problems


def test_the_checker_accepts_targets_first_and_configfile_last():
    for text in ("snakemake all --configfile config/demo.yaml config/overlays/demo-dogs.yaml",
                 "snakemake --profile slurm -n all",
                 "snakemake all --configfile config/demo.yaml --cores 2 --forcerun claims figure2",
                 "snakemake --configfile config/demo.yaml …"):
        assert snakemake_problems(text) == [], text


def test_dry_runs_expand_braces_and_make_file_arguments_absolute(tmp_path):
    assert expand_braces("t{1,2}/f{a,b}.md") == ["t1/fa.md", "t1/fb.md", "t2/fa.md", "t2/fb.md"]
    argv = dry_run_argv("snakemake --profile slurm r/table{1,8}.md --configfile config/demo.yaml"
                        " nope.yaml", tmp_path)
    assert argv[3:] == ["--profile", str(ROOT / "slurm"), "r/table1.md", "r/table8.md",
                        "--configfile", str(ROOT / "config" / "demo.yaml"), "nope.yaml",
                        "--directory", str(tmp_path), "-n", "--quiet", "rules"]


def test_extraction_joins_continuations_and_strips_prompts_comments_and_srun():
    page = ("text `make sure` and `make demo`\n```bash\n$ snakemake --profile slurm \\\n"
            "    all   # the grid\nsrun -p <gpu partition> --gpus=1 make bench-gpu\n"
            "python -m snakemake …\n```\nand `sbatch --wrap \"python -m snakemake all\"`\n")
    found = [(c.where, c.text) for c in commands_in_markdown(page, "p.md")]
    assert found == [("p.md:3", "snakemake --profile slurm all"), ("p.md:5", "make bench-gpu"),
                     ("p.md:1", "make sure"), ("p.md:1", "make demo")]
    yaml_text = "# head\n#   snakemake all \\\n#     --configfile x.yaml\nkey: 1\n# snakemake later\n"
    assert [c.text for c in commands_in_yaml_comments(yaml_text, "o.yaml", True)] == [
        "snakemake all --configfile x.yaml"]
    assert len(commands_in_yaml_comments(yaml_text, "o.yaml", False)) == 2


def test_the_docs_print_commands_from_every_kind_of_source():
    where = {c.where.split(":")[0] for c in COMMANDS}
    assert {"README.md", "config/README.md", "docs/cluster.md", "docs/running.md",
            "envs/torch.yaml", "config/overlays/pilot-cell.yaml",
            "config/overlays/pilot-giants.yaml"} <= where
    assert len(_distinct("snakemake")) >= 20 and len(_distinct("make")) >= 15


def test_every_exception_is_still_printed():
    """The lists of exceptions name only what the docs print (a stale entry fails)."""
    texts = {c.text for c in COMMANDS}
    assert not set(NOT_RUN) - texts
    assert not set(EXPECTED_FAILURES) - texts
    printed = " ".join(c.text for c in COMMANDS)
    raw = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md"))
    assert not [p for p in SUBSTITUTIONS if p not in printed and p not in raw]


@pytest.mark.parametrize("cmd", _distinct("snakemake"), ids=lambda c: c.where)
def test_every_printed_snakemake_line_parses_as_meant(cmd, fixtures):
    assert snakemake_problems(substitute(cmd.text, fixtures)) == [], PLACES[cmd.text]


# ----------------------------------------------------------------------------- make lines
def makefile_variables(makefile: str) -> set[str]:
    """Every variable the Makefile reads (``$(NAME)``, also inside functions)."""
    return set(re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", makefile))


def makefile_targets(makefile: str) -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w.-]*)[ \t]*:(?!=)", makefile, flags=re.M))


def make_problems(text: str, fixtures: Path, makefile: str) -> list[str]:
    words = shlex.split(text.replace("…", "X"))[1:]
    assigns = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    targets = [w for w in words if "=" not in w and not w.startswith("-")]
    problems = [f"no make target {t!r}" for t in targets if t not in makefile_targets(makefile)]
    problems += [f"the Makefile never reads {v}" for v in assigns
                 if v not in makefile_variables(makefile)]
    for value in assigns.values():
        problems += [f"{p}: no such file" for p in _PATH.findall(value)
                     if not (ROOT / p.rstrip(".,:;")).exists()]
    return problems


def test_the_make_checker_sees_an_unknown_target_variable_or_file(fixtures):
    makefile = MAKEFILE.read_text()
    assert make_problems("make forecast GPUS=32", fixtures, makefile) == []
    assert make_problems("make forcast", fixtures, makefile) == ["no make target 'forcast'"]
    assert make_problems("make forecast GPU=32", fixtures, makefile) == [
        "the Makefile never reads GPU"]
    assert make_problems("make forecast CONFIG=config/overlays/nope.yaml", fixtures,
                         makefile) == ["config/overlays/nope.yaml: no such file"]


@pytest.mark.parametrize("cmd", _distinct("make"), ids=lambda c: c.where)
def test_every_printed_make_line_names_a_target_and_variables_the_makefile_has(cmd, fixtures,
                                                                              tmp_path):
    text = substitute(cmd.text, fixtures)
    assert make_problems(text, fixtures, MAKEFILE.read_text()) == [], PLACES[cmd.text]
    # what it would run, printed only (-n), with a throw-away venv
    words = shlex.split(text.replace("…", "X"))[1:]
    proc = subprocess.run(["make", "-n", *words, f"VENV={tmp_path}/venv"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{cmd.where}: make -n {cmd.text}:\n{proc.stderr}"


# ----------------------------------------------------------------------------- slow: dry runs
def expand_braces(word: str) -> list[str]:
    """A word as the shell expands ``{a,b}`` in it (``table{1,2}.md`` -> two words)."""
    m = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if not m:
        return [word]
    return [w for part in m.group(1).split(",")
            for w in expand_braces(word[:m.start()] + part + word[m.end():])]


def dry_run_argv(text: str, workdir: Path) -> list[str]:
    """The printed command as a dry run in ``workdir``: braces expanded as the shell does, this
    interpreter's Snakemake, file arguments (``--configfile``, ``--profile``) absolute,
    ``--directory workdir -n --quiet rules`` added (the job table stays)."""
    words = [x for w in shlex.split(text)[1:] for x in expand_braces(w)]
    out, option = [], None
    for w in words:
        if w.startswith("-"):
            option = w
        elif option in ("--configfile", "--configfiles", "--profile", "-s", "--snakefile") \
                and (ROOT / w).exists():
            w = str((ROOT / w).resolve()) if option != "--profile" else str(ROOT / w)
        out.append(w)
    return [sys.executable, "-m", "snakemake", *out, "--directory", str(workdir), "-n",
            "--quiet", "rules"]


def _job_stats(output: str) -> dict[str, int]:
    block = output.split("Job stats:", 1)[-1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", block, re.M)}


def _run(cmd: Printed, fixtures: Path, workdir: Path) -> subprocess.CompletedProcess:
    argv = dry_run_argv(substitute(cmd.text, fixtures), workdir)
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.slow  # one dry run per distinct line: ~5 CPU-s each on the paper config
@pytest.mark.parametrize("cmd", _distinct("snakemake", runnable=True), ids=lambda c: c.where)
def test_every_printed_snakemake_line_dry_runs(cmd, fixtures, tmp_path):
    if any(o in cmd.text for o in CONDA_OPTIONS) and shutil.which("conda") is None:
        pytest.skip(f"{cmd.text}: conda is not installed here (Snakemake runs `conda info` "
                    "even in a dry run); its arguments are checked by the fast test")
    proc = _run(cmd, fixtures, tmp_path)
    output = proc.stdout + proc.stderr
    if cmd.text in EXPECTED_FAILURES:
        assert proc.returncode != 0 and EXPECTED_FAILURES[cmd.text] in output, output[-3000:]
    else:
        assert proc.returncode == 0, f"{PLACES[cmd.text]}: {cmd.text}\n{output[-3000:]}"


def _giants_command() -> Printed:
    found = [c for c in _distinct("snakemake", runnable=True) if "pilot-giants.yaml" in c.text
             and c.where.startswith("docs/cluster.md")]
    assert len(found) >= 1, "docs/cluster.md prints no command of the giants' pilot"
    return found[0]


@pytest.mark.slow  # one paper-config dry run
def test_the_giants_pilot_plans_the_three_largest_jobs_and_their_inputs(fixtures, tmp_path):
    """The giants' pilot as docs/cluster.md prints it: one ResNet-152 training job, one
    AutoAttack job, one PPA job of one shard's classes, and what they read (the dataset, the
    weights, the evaluation model, the real images' embeddings) -- no other GPU job."""
    proc = _run(_giants_command(), fixtures, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _job_stats(proc.stdout + proc.stderr)
    gpu = {r: n for r, n in jobs.items() if r in (
        "train_model", "autoattack", "invert", "invert_shard", "measure_hsic",
        "train_evaluation_model", "real_embeddings", "train_generator")}
    assert gpu == {"train_model": 1, "autoattack": 1, "invert": 1,
                   "train_evaluation_model": 1, "real_embeddings": 1}, jobs
    assert jobs["total"] <= 15, jobs

