"""workflow/scripts/_common.py: jobs run the code of the checkout they were started in, and
a retry appends to the rule's log instead of overwriting the failed attempt's."""

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]



def _tiny() -> str:
    """minimal/config.yaml with no inversion attack (``inversion.attacks: []``, set by key, not
    by appending a line: the file's last mapping changes as the config grows)."""
    config = yaml.safe_load((ROOT / ".test" / "minimal" / "config.yaml").read_text())
    config["inversion"]["attacks"] = []
    return yaml.safe_dump(config, sort_keys=False)


TINY = _tiny()


def load_common(monkeypatch):
    """A fresh copy of _common (importing it rearranges sys.path, setup() sets the torch
    threads and stderr: all undone by monkeypatch)."""
    import torch

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    threads = torch.get_num_threads()
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    assert torch.get_num_threads() == threads
    spec = importlib.util.spec_from_file_location("_common_under_test",
                                                  ROOT / "workflow" / "scripts" / "_common.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def copy_checkout(dest: Path) -> Path:
    """The files of this working tree that a run needs (tracked and new, not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard", "--",
                             "Snakefile", "src", "workflow", "config", "data", "envs",
                             "profiles"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    return dest


@pytest.mark.slow
def test_two_checkouts_one_environment_each_job_runs_its_own_checkout(tmp_path):
    # The virtualenv running this test has an editable install of ROOT (its .pth puts
    # ROOT/src on sys.path); Snakemake's script preamble appends the main process's path
    # after it. Each clone's job must still import the clone's own package.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OMP_NUM_THREADS"] = "1"
    for name in ("clone_a", "clone_b"):
        clone = copy_checkout(tmp_path / name)
        (clone / "tiny.yaml").write_text(TINY)
        target = "resources/datasets/synthfaces"
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", "--configfile", "config/demo.yaml", "tiny.yaml",
             "--cores", "1", target], cwd=clone, env=env, capture_output=True, text=True,
            timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        log = (clone / "logs" / "data" / "synthfaces_synthfaces.log").read_text()
        ran = [line for line in log.splitlines() if "runs the code in" in line]
        assert len(ran) == 1, log[-2000:]
        assert ran[0].endswith(f"runs the code in {clone / 'src' / 'atat'}"), ran[0]


def test_this_checkout_goes_first_and_a_foreign_atat_is_dropped(tmp_path, monkeypatch):
    common = load_common(monkeypatch)
    here = str(common.SRC)
    other = tmp_path / "other" / "src"
    (other / "atat").mkdir(parents=True)
    (other / "atat" / "__init__.py").write_text("")
    foreign = types.ModuleType("atat")
    foreign.__file__ = str(other / "atat" / "__init__.py")
    saved = {m: sys.modules[m] for m in list(sys.modules) if m == "atat" or m.startswith("atat.")}
    try:
        for m in saved:
            del sys.modules[m]
        sys.modules["atat"] = foreign
        sys.modules["atat.base.io"] = types.ModuleType("atat.base.io")  # no __file__: also foreign
        sys.path[:] = [str(other), "/x", here, "/y", here]  # editable .pth first, ours appended
        common.use_this_checkout()
        assert sys.path == [here, str(other), "/x", "/y"]
        assert "atat" not in sys.modules and "atat.base.io" not in sys.modules
    finally:
        for m in [m for m in sys.modules if m == "atat" or m.startswith("atat.")]:
            del sys.modules[m]
        sys.modules.update(saved)


def test_our_own_atat_is_kept(monkeypatch):
    import atat

    common = load_common(monkeypatch)
    if not atat.__file__.startswith(str(common.SRC)):
        pytest.skip("atat is imported from elsewhere in this test process")
    common.use_this_checkout()
    assert sys.modules["atat"] is atat


class FakeSnakemake:
    def __init__(self, log, outputs=()):
        self.log = [str(log)]
        self.output = [str(o) for o in outputs]
        self.threads = 1
        self.rule = "fake_rule"


def test_every_attempt_is_kept_under_its_own_header(tmp_path, monkeypatch):
    common = load_common(monkeypatch)
    log_file = tmp_path / "logs" / "x.log"
    history = tmp_path / "logs" / "x.attempts.log"
    assert common.attempts_log(log_file) == history
    for attempt in (1, 2, 3):
        log_file.unlink(missing_ok=True)  # what Snakemake does before it (re)starts a job
        common.setup(FakeSnakemake(log_file))
        logging.getLogger("atat.test").error("failure of attempt %d", attempt)
        print("a traceback line", file=sys.stderr)
        sys.stderr.close()
        logging.basicConfig(force=True)
    current = log_file.read_text()  # the declared log: this attempt (what Snakemake shows)
    assert current.startswith("===== attempt 3 of this job started ")
    assert "failure of attempt 3" in current and "failure of attempt 2" not in current
    lines = history.read_text().splitlines()  # the attempts log: every attempt, in order
    headers = [line for line in lines if line.startswith("===== attempt ")]
    assert [h.split()[2] for h in headers] == ["1", "2", "3"]
    import socket

    assert all(socket.gethostname() in h and "started 20" in h for h in headers)
    for attempt in (1, 2, 3):
        at = lines.index(headers[attempt - 1])
        nxt = lines.index(headers[attempt]) if attempt < 3 else len(lines)
        part = lines[at:nxt]
        assert any(f"failure of attempt {attempt}" in line for line in part)
        assert "a traceback line" in part
    assert "\r" not in history.read_text()


def test_setup_removes_stale_temporaries_of_the_outputs(tmp_path, monkeypatch):
    common = load_common(monkeypatch)
    out = tmp_path / "results" / "model.pt"
    out.parent.mkdir(parents=True)
    stale = out.parent / ".model.pt.k2j3h4.tmp"
    stale.write_bytes(b"x" * 100)
    os.utime(stale, (1e9, 1e9))  # written long before this process started
    other = out.parent / ".other.pt.a1b2c3.tmp"  # a temporary of another output: not ours
    other.write_bytes(b"y")
    os.utime(other, (1e9, 1e9))
    common.setup(FakeSnakemake(tmp_path / "x.log", [out]))
    sys.stderr.close()
    logging.basicConfig(force=True)
    assert not stale.exists() and other.exists()
