"""atat.base.device: `device: cuda` never falls back to the CPU; the message names driver, build,
capability and remedy. torch.cuda is monkeypatched to be unavailable / an unsupported GPU."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from atat.base import device as dev
from atat.plan.config import ConfigError, load_config, validate_config

ROOT = Path(__file__).resolve().parents[1]


def no_gpu(monkeypatch, driver=None):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(dev, "driver_version", lambda: driver)


def v100(monkeypatch, arch=("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(arch))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (7, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Tesla V100-SXM2-32GB")
    monkeypatch.setattr(dev, "driver_version", lambda: "590.10")


def test_cuda_without_a_gpu_stops_naming_driver_build_and_remedy(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_75", "sm_80", "sm_120"])
    no_gpu(monkeypatch, driver="535.104.05")
    with pytest.raises(dev.DeviceError) as err:
        dev.resolve_device("cuda")
    msg = str(err.value)
    for part in ("device: cuda", "NVIDIA driver 535.104.05", "older than 580", "CUDA 13.0",
                 "sm_75 sm_80 sm_120", "needs an NVIDIA driver >= 580", "TORCH_INDEX_URL",
                 "device: cpu"):
        assert part in msg, (part, msg)


def test_no_driver_at_all_is_said(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_75"])
    no_gpu(monkeypatch, driver=None)
    with pytest.raises(dev.DeviceError, match="no NVIDIA driver found"):
        dev.resolve_device("cuda")


def test_a_gpu_the_build_has_no_kernels_for_is_named_with_its_capability(monkeypatch):
    v100(monkeypatch)
    with pytest.raises(dev.DeviceError) as err:
        dev.resolve_device("cuda")
    msg = str(err.value)
    assert "Tesla V100-SXM2-32GB (compute capability 7.0, sm_70)" in msg, msg
    assert "NVIDIA driver 590.10" in msg and "sm_75" in msg


def test_a_supported_gpu_is_used(monkeypatch):
    v100(monkeypatch, arch=("sm_70", "sm_80"))
    assert dev.resolve_device("cuda") == "cuda"
    assert dev.resolve_device("auto") == "cuda"


def test_cpu_is_cpu_even_with_a_gpu_and_auto_falls_back_with_a_warning(monkeypatch, caplog):
    v100(monkeypatch, arch=("sm_70",))
    assert dev.resolve_device("auto") == "cuda"
    assert dev.resolve_device("cpu") == "cpu"
    no_gpu(monkeypatch, driver=None)
    with caplog.at_level("WARNING"):
        assert dev.resolve_device("auto") == "cpu"
    assert "device: auto runs this job on the CPU" in caplog.text


def test_capability_rules():
    assert dev.capability_supported((8, 9), ["sm_80", "sm_90"])      # sm_80 cubin runs on 8.9
    assert not dev.capability_supported((7, 0), ["sm_75", "sm_80"])  # V100 under CUDA 13
    assert dev.capability_supported((9, 0), ["sm_80", "compute_80"])  # PTX JIT
    assert dev.capability_supported((9, 0), ["sm_90a"])
    assert not dev.capability_supported((10, 0), ["sm_90a"])


def test_driver_version_from_proc(tmp_path, monkeypatch):
    proc = tmp_path / "version"
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 "
                    "22:23:56 UTC 2024\nGCC version:  gcc version 12.3.0\n")
    assert dev.driver_version(proc) == "550.54.15"
    proc.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release\n")
    assert dev.driver_version(proc) == "580.65.06"
    monkeypatch.setattr(dev.shutil, "which", lambda name: None)
    assert dev.driver_version(tmp_path / "absent") is None


def test_required_driver():
    assert dev.required_driver("13.0") == 580
    assert dev.required_driver("12.6") == 525
    assert dev.required_driver(None) is None


def test_device_setting_is_validated_and_the_configs_say_what_the_issue_asks():
    paper = load_config(ROOT / "config" / "config.yaml")
    demo = load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml")
    assert paper["device"] == "cuda" and demo["device"] == "cpu"
    with pytest.raises(ConfigError, match="device"):
        validate_config({**demo, "device": "gpu"})


def test_the_adapter_stops_a_cuda_job_without_a_gpu_in_seconds(tmp_path):
    """workflow/scripts/_common.device() under the paper config's `device: cuda` with CUDA
    hidden (CUDA_VISIBLE_DEVICES=''): the job stops with the message; under cpu it runs."""
    code = (
        "import sys, types; sys.path.insert(0, 'workflow/scripts')\n"
        "import _common\n"
        "sm = types.SimpleNamespace(log=[], output=[], threads=1, rule='train_model',"
        f" config={{'device': sys.argv[1]}})\n"
        "_common.setup(sm)\n"
        "print('DEVICE', _common.device())\n"
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    bad = subprocess.run([sys.executable, "-c", code, "cuda"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0
    assert "DeviceError: device: cuda, but no usable GPU" in bad.stderr, bad.stderr[-2000:]
    assert "torch.cuda.is_available() is False" in bad.stderr
    good = subprocess.run([sys.executable, "-c", code, "cpu"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert good.returncode == 0 and "DEVICE cpu" in good.stdout, good.stderr[-2000:]


@pytest.mark.slow
def test_a_gpu_rule_under_device_cuda_stops_in_seconds_through_snakemake(tmp_path):
    """The paper config's `device: cuda` on the tiny config with CUDA hidden: rule train_model
    fails at once with the message (no CPU training), once (no retry can help)."""
    import time

    overlay = tmp_path / "cuda.yaml"
    overlay.write_text("device: cuda\n")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    prep = subprocess.run(
        [sys.executable, "-m", "snakemake", "resources/datasets/synthfaces.dataset.json",
         "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile",
         str(ROOT / "config" / "demo.yaml"), str(ROOT / ".test" / "tiny" / "config.yaml"),
         str(overlay), "--cores", "1"], env=env, capture_output=True, text=True, timeout=600)
    assert prep.returncode == 0, prep.stderr[-3000:]  # a CPU rule: runs
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake",
         "results/models/synthfaces/resnet18/nodef/seed0/model.pt", "-s", str(ROOT / "Snakefile"),
         "--directory", str(tmp_path), "--configfile", str(ROOT / "config" / "demo.yaml"),
         str(ROOT / ".test" / "tiny" / "config.yaml"), str(overlay), "--cores", "1",
         "--show-failed-logs"], env=env, capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "DeviceError: device: cuda, but no usable GPU" in out, out[-3000:]
    assert "torch.cuda.is_available() is False" in out and "TORCH_INDEX_URL" in out
    assert " epoch 0" not in out  # not a single epoch on the CPU
    assert seconds < 120, seconds


def test_a_cpu_only_torch_build_is_named(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(dev.DeviceError, match="has no CUDA support"):
        dev.resolve_device("cuda")
