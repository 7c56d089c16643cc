"""A throw-away one-node SLURM cluster on localhost, for tests/test_slurm.py.

munged, slurmctld and slurmd run as root from a temporary directory: their own slurm.conf
(from slurm.conf.in), munge key and socket, state, spool, pid and log files, and free TCP
ports, so nothing under /etc or /run is touched and a system SLURM (if any) is left alone.
Clients find the cluster through SLURM_CONF in `Cluster.env`. `stop()` ends exactly the
daemons this module started, by pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = ["slurm-wlm", "munge"]
BINARIES = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol"]


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists()]


def ensure_installed() -> str | None:
    """Install slurm-wlm and munge from Debian when missing. Returns None when everything is
    there, else the reason why it cannot be (for pytest.skip)."""
    if not missing_binaries():
        return None
    if os.geteuid() != 0:
        return f"SLURM binaries {missing_binaries()} missing and not root (cannot apt-get install)"
    if shutil.which("apt-get") is None:
        return f"SLURM binaries {missing_binaries()} missing and no apt-get on this machine"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    steps = [["apt-get", "update", "-qq"],
             ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]]
    for cmd in steps:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            return f"`{' '.join(cmd)}` failed: {(proc.stderr or proc.stdout)[-500:]}"
    if missing_binaries():
        return f"still missing after apt-get install: {missing_binaries()}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class Cluster:
    def __init__(self, directory: Path, cpus: int = 2, mem_mb: int = 20000):
        self.dir = Path(directory)
        self.cpus = cpus
        self.mem_mb = mem_mb
        self.pids: dict[str, int] = {}
        self.conf = self.dir / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        for key in list(self.env):  # never inherit an outer allocation
            if key.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_")) and key != "SLURM_CONF":
                del self.env[key]

    # ---- start -----------------------------------------------------------------------
    def start(self, timeout: float = 60) -> "Cluster":
        for sub in ["munge", "state", "spool", "bin"]:
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)
        os.chmod(self.dir / "munge", 0o755)
        self._write_conf()
        self._write_srun_wrapper()
        self._start_munged()
        self._start_daemon("slurmctld", [_sbin("slurmctld"), "-f", str(self.conf), "-i"])
        self._start_daemon("slurmd", [_sbin("slurmd"), "-f", str(self.conf), "-N", "localhost"])
        self._wait_idle(timeout)
        return self

    def _write_conf(self):
        text = (HERE / "slurm.conf.in").read_text()
        values = {"HOST": socket.gethostname().split(".")[0], "DIR": str(self.dir),
                  "CTLD_PORT": _free_port(), "SLURMD_PORT": _free_port(),
                  "CPUS": self.cpus, "MEM_MB": self.mem_mb}
        for key, value in values.items():
            text = text.replace(f"@{key}@", str(value))
        self.conf.write_text(text)

    def _write_srun_wrapper(self):
        # The slurm-jobstep plugin (0.6.1) removes every SLURM_* variable but a few job ids
        # from the environment of the `srun` it runs inside the job, SLURM_CONF included, so
        # that srun would look for /etc/slurm/slurm.conf. A real cluster has its config
        # there (or runs configless); this private one is found through an srun wrapper
        # first on PATH, which sbatch exports into the job.
        wrapper = self.dir / "bin" / "srun"
        wrapper.write_text(f'#!/bin/sh\nSLURM_CONF="{self.conf}" exec "{shutil.which("srun")}" "$@"\n')
        os.chmod(wrapper, 0o755)
        self.env["PATH"] = f"{wrapper.parent}{os.pathsep}{self.env.get('PATH', '')}"

    def _start_munged(self):
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        pidfile = self.dir / "munge" / "munged.pid"
        subprocess.run(
            [_sbin("munged"), "--force", f"--socket={self.dir}/munge/munge.socket.2",
             f"--key-file={key}", f"--pid-file={pidfile}", f"--log-file={self.dir}/munged.log",
             f"--seed-file={self.dir}/munge/munged.seed"],
            check=True, capture_output=True, text=True, timeout=30)
        self.pids["munged"] = self._read_pid(pidfile)

    def _start_daemon(self, name: str, cmd: list[str]):
        subprocess.run(cmd, env=self.env, check=True, capture_output=True, text=True, timeout=60)
        self.pids[name] = self._read_pid(self.dir / f"{name}.pid")

    @staticmethod
    def _read_pid(pidfile: Path, timeout: float = 20) -> int:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pidfile.exists() and pidfile.read_text().strip():
                return int(pidfile.read_text().split()[0])
            time.sleep(0.2)
        raise RuntimeError(f"no pid file {pidfile}")

    def _wait_idle(self, timeout: float):
        deadline = time.time() + timeout
        out = ""
        while time.time() < deadline:
            proc = self.run(["sinfo", "-h", "-N", "-o", "%T"], check=False)
            out = proc.stdout + proc.stderr
            if proc.returncode == 0 and out.strip() and all(
                    s.strip().rstrip("*") == "idle" for s in proc.stdout.split()):
                return
            time.sleep(1)
        raise RuntimeError(f"node never became idle: {out}\n{self.logs()}")

    # ---- use -------------------------------------------------------------------------
    def run(self, cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=check,
                              timeout=kw.pop("timeout", 60), **kw)

    def jobs(self) -> list[dict]:
        """Every job slurmctld still knows (MinJobAge=7200), finished ones included."""
        fmt = "%i|%j|%T|%P|%k"
        out = self.run(["squeue", "--states=all", "-h", "-o", fmt]).stdout
        keys = ["id", "name", "state", "partition", "comment"]
        return [dict(zip(keys, line.split("|", 4))) for line in out.splitlines() if line]

    def completed(self) -> list[dict]:
        """jobcomp/filetxt records: one per finished job, key=value pairs."""
        path = self.dir / "jobcomp.log"
        if not path.exists():
            return []
        records = []
        for line in path.read_text().splitlines():
            rec = {}
            for field in line.split():
                if "=" in field:
                    k, v = field.split("=", 1)
                    rec[k] = v
            records.append(rec)
        return records

    def logs(self) -> str:
        parts = []
        for name in ["slurmctld.log", "slurmd.log", "munged.log"]:
            path = self.dir / name
            if path.exists():
                parts.append(f"--- {name} (tail)\n" + "\n".join(path.read_text().splitlines()[-30:]))
        return "\n".join(parts)

    # ---- stop ------------------------------------------------------------------------
    def stop(self, timeout: float = 20):
        for name in ["slurmd", "slurmctld", "munged"]:
            pid = self.pids.pop(name, None)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.time() + timeout
            while time.time() < deadline and _alive(pid):
                time.sleep(0.2)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
