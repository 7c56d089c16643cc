"""Which device a GPU rule runs on (config ``device``), and why it cannot use the GPU.

Three settings:

* ``cuda`` (the paper config): the job runs on the GPU or stops at once. A node whose NVIDIA
  driver is too old for this torch build, a GPU whose compute capability the build has no
  kernels for (a V100, sm_70, under a CUDA 13 build) or a job that got no GPU never falls
  back to hours of CPU work: :func:`resolve_device` raises :class:`DeviceError` with one
  message naming the driver version, the torch build's CUDA version and kernel list, the
  device's compute capability and what to do.
* ``cpu`` (the demo): the CPU, knowingly, even where a GPU exists.
* ``auto``: the GPU when one is usable, else the CPU with a warning in the job's log.

The driver requirement per CUDA major version (minor version compatibility) is NVIDIA's
(docs/sources.md, "CUDA driver requirement of the torch build").
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

DEVICE_SETTINGS = ("auto", "cuda", "cpu")
DEFAULT_DEVICE = "auto"
#: CUDA major version of a torch build -> the oldest NVIDIA driver branch that runs it (NVIDIA's
#: minor version compatibility table, docs/sources.md "CUDA driver requirement of the torch build")
MIN_DRIVER_BY_CUDA_MAJOR = {11: 450, 12: 525, 13: 580}
#: where the Linux kernel module reports its version
PROC_DRIVER_VERSION = Path("/proc/driver/nvidia/version")

log = logging.getLogger(__name__)


class DeviceError(RuntimeError):
    """``device: cuda`` but no usable GPU; the message says why and what to do."""


def check_device_setting(value: Any, key: str = "device") -> str:
    """``value`` if it is one of :data:`DEVICE_SETTINGS`, else a ValueError naming ``key``."""
    if value not in DEVICE_SETTINGS:
        raise ValueError(f"{key} must be one of {', '.join(DEVICE_SETTINGS)}, got {value!r}")
    return str(value)


def driver_version(proc_file: Path = PROC_DRIVER_VERSION) -> str | None:
    """The NVIDIA kernel driver's version (e.g. ``"535.104.05"``), from ``proc_file`` or
    ``nvidia-smi``; None when neither shows a driver."""
    try:
        text = proc_file.read_text(errors="replace")
    except OSError:
        text = ""
    match = re.search(r"Kernel Module(?: for [\w-]+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if match:
        return match.group(1)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"\d+\.\d+(?:\.\d+)?", out)
    return found.group(0) if found else None


def required_driver(cuda_version: str | None) -> int | None:
    """The oldest driver branch a torch build of ``cuda_version`` (``"13.0"``) runs on."""
    if not cuda_version:
        return None
    try:
        major = int(cuda_version.split(".")[0])
    except ValueError:
        return None
    return MIN_DRIVER_BY_CUDA_MAJOR.get(major)


def capability_supported(capability: tuple[int, int], arch_list: list[str]) -> bool:
    """Whether a build with kernels ``arch_list`` (``torch.cuda.get_arch_list()``) runs on a
    device of compute ``capability``: a cubin ``sm_XY`` runs on X.Z with Z >= Y (same major),
    PTX ``compute_XY`` is compiled for any device of X.Y or newer."""
    major, minor = capability
    for arch in arch_list:
        match = re.fullmatch(r"(sm|compute)_(\d+)([a-z]?)", arch)
        if not match:
            continue
        kind, digits, suffix = match.groups()
        a_major, a_minor = int(digits[:-1]), int(digits[-1])
        if suffix:  # sm_90a etc.: that exact device only
            if (a_major, a_minor) == (major, minor):
                return True
        elif kind == "sm" and a_major == major and a_minor <= minor:
            return True
        elif kind == "compute" and (a_major, a_minor) <= (major, minor):
            return True
    return False


def cuda_problem(torch_module: Any = None) -> str | None:
    """None when the GPU can run this torch build, else why not, what was found and what to do
    (one paragraph)."""
    if torch_module is None:
        import torch as torch_module
    torch = torch_module
    build_cuda = torch.version.cuda
    arch_list = list(torch.cuda.get_arch_list()) if build_cuda else []
    build = (f"this torch build ({torch.__version__}) is for CUDA {build_cuda} with kernels for "
             f"{' '.join(arch_list) or 'no architecture'}" if build_cuda
             else f"this torch build ({torch.__version__}) has no CUDA support (a CPU-only wheel)")
    need = required_driver(build_cuda)
    need_text = f"; it needs an NVIDIA driver >= {need}" if need else ""
    remedy = ("What to do: install a torch build for this node (`make venv TORCH_INDEX_URL=...`, "
              "e.g. a CUDA 12 build for a driver >= 525; see docs/cluster.md), run "
              "the job on a node with a newer driver or another GPU, or set `device: cpu` in the "
              "config to run on the CPU knowingly (orders of magnitude slower).")
    if not build_cuda:
        return f"no usable GPU: {build}. {remedy}"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        driver = driver_version()
        driver_text = (f"NVIDIA driver {driver}" if driver else
                       f"no NVIDIA driver found (no {PROC_DRIVER_VERSION}, no nvidia-smi)")
        too_old = ""
        if driver and need:
            try:
                if int(driver.split(".")[0]) < need:
                    too_old = f" -- the driver is older than {need}"
            except ValueError:
                pass
        return (f"no usable GPU: torch.cuda.is_available() is False ({driver_text}{too_old}); "
                f"{build}{need_text}. {remedy}")
    unsupported = []
    for index in range(torch.cuda.device_count()):
        capability = tuple(torch.cuda.get_device_capability(index))
        if not capability_supported(capability, arch_list):
            unsupported.append(f"cuda:{index} {torch.cuda.get_device_name(index)} "
                               f"(compute capability {capability[0]}.{capability[1]}, "
                               f"sm_{capability[0]}{capability[1]})")
    if unsupported:
        driver = driver_version() or "unknown"
        return (f"no usable GPU: {'; '.join(unsupported)} has no kernels in this build (NVIDIA "
                f"driver {driver}); {build}{need_text}. Not a memory problem: a larger card "
                f"of the same kind fails the same way; on a SLURM cluster, leave this GPU type "
                f"out of the cluster settings' gpu_cards (or give its compute capability there, "
                f"name=MB@X.Y, and the run is refused before any job). {remedy}")
    return None


def build_arch_list(torch_module: Any = None) -> list[str]:
    """The GPU architectures the installed torch build has kernels for (``sm_80``, ...;
    empty for a CPU-only build); needs no GPU."""
    if torch_module is None:
        import torch as torch_module
    if not torch_module.version.cuda:
        return []
    return list(torch_module.cuda.get_arch_list())


def resolve_device(setting: str, torch_module: Any = None) -> str:
    """``"cuda"`` or ``"cpu"`` for the config's ``device`` setting; raises :class:`DeviceError`
    (``cuda`` without a usable GPU) naming the reason and the remedy."""
    check_device_setting(setting)
    if setting == "cpu":
        return "cpu"
    problem = cuda_problem(torch_module)
    if problem is None:
        return "cuda"
    if setting == "cuda":
        raise DeviceError(f"device: cuda, but {problem}")
    log.warning("device: auto runs this job on the CPU: %s", problem)
    return "cpu"
