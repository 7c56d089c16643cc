"""`make float-paths`: how much the embedded default's numbers move with the CPU's float path.

Issue 17 item 4: the same commit's demo gave NoDef test accuracy 0.567 on one machine and 0.667
on another. A training run is deterministic on one machine at one thread count, but the
kernels PyTorch picks depend on the CPU (ATen's vector ISA, oneDNN's convolution ISA) and on the
number of threads (the order in which a reduction adds its terms), and from-scratch training on
60 steps amplifies a last-bit difference like a change of seed.

This module trains the demo's NoDef (SynthFaces, ResNet-18, the demo's recipe, through
:func:`atat.training.train.train`) once per *float path*, each in a fresh process whose environment
selects the path, and prints test/validation accuracy and a digest of the trained weights:

* ``native``: this CPU's own kernels, one thread (what ``make demo`` runs: one thread per job);
* ``native_repeat``: the same again (determinism: must give the same digest);
* ``onednn_avx2``: oneDNN's convolutions limited to AVX2 (``ONEDNN_MAX_CPU_ISA``);
* ``avx2``: ATen's vector kernels and oneDNN both limited to AVX2 (``ATEN_CPU_CAPABILITY``),
  what a CPU without AVX-512 runs;
* ``threads2``: native kernels on two threads;
* ``seed1``: native, one thread, training seed 1 instead of 0 (a change of seed, for scale).

Paths this CPU cannot take (an AVX2 limit on a CPU without AVX2) are skipped with the reason.
Table on the terminal, CSV in ``results/bench/float_paths.csv``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[3]

#: name -> (environment added to the child's, torch threads, training seed)
PATHS: dict[str, tuple[dict[str, str], int, int]] = {
    "native": ({}, 1, 0),
    "native_repeat": ({}, 1, 0),
    "onednn_avx2": ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, 1, 0),
    "avx2": ({"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}, 1, 0),
    "threads2": ({}, 2, 0),
    "seed1": ({}, 1, 1),
}
#: what the child prints and the table/CSV hold, in order
FIELDS = ("path", "env", "threads", "seed", "cpu_capability", "test_acc", "val_acc", "digest",
          "cpu_s")


def weights_digest(state: Mapping[str, Any]) -> str:
    """sha256 over every tensor of a state dict, in key order (first 16 hex digits)."""
    import torch

    h = hashlib.sha256()
    for key in sorted(state):
        value = state[key]
        if torch.is_tensor(value):
            h.update(key.encode())
            h.update(value.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def train_once(work: Path, *, seed: int, epochs: int | None, cache: Path) -> dict[str, Any]:
    """Train the demo's NoDef into ``work`` (fresh) and return its accuracies and digest."""
    import torch

    from atat.base import io
    from atat.lab.bench import bench_dataset, demo_config
    from atat.plan.config import defense_params
    from atat.training.train import TrainSpec, train

    cfg = demo_config()
    root = bench_dataset(cache, cfg)
    ds = cfg["datasets"]["synthfaces"]
    training = dict(cfg["training"])
    if epochs is not None:
        training.update(epochs=epochs, lr_milestones=[epochs + 1])
    spec = TrainSpec(model_id=f"float_paths/seed{seed}", dataset_root=str(root),
                     resolution=int(ds["resolution"]), n_classes=int(ds["n_classes"]),
                     architecture="resnet18", defense=defense_params(cfg, "nodef"),
                     training=training, augmentation=cfg["augmentation"], seed=seed)
    start = time.process_time()
    train(spec, out_model=work / "model.pt", out_metrics=work / "metrics.json",
          resume_path=work / "resume.pt", progress=False)
    metrics = io.read_json(work / "metrics.json")
    ckpt = io.torch_load(work / "model.pt")
    state = ckpt.get("state_dict", ckpt) if isinstance(ckpt, dict) else ckpt
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "test_acc": float(metrics["test_acc"]), "val_acc": float(metrics["val_acc"]),
            "digest": weights_digest(state), "cpu_s": round(time.process_time() - start, 1)}


def _child(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--epochs", type=int)
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    out = train_once(Path(a.work), seed=a.seed, epochs=a.epochs, cache=Path(a.cache))
    print("FLOAT_PATH_RESULT " + json.dumps(out), flush=True)
    return 0


def run_path(name: str, *, work: Path, cache: Path, epochs: int | None = None,
             paths: Mapping[str, tuple[dict[str, str], int, int]] = PATHS) -> dict[str, Any]:
    """Train under float path ``name`` in a fresh process; its row of the table."""
    env_add, threads, seed = paths[name]
    env = {**os.environ, **env_add, "OMP_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "atat.lab.float_paths", "--child", "--work", str(work / name),
           "--cache", str(cache), "--threads", str(threads), "--seed", str(seed)]
    if epochs is not None:
        cmd += ["--epochs", str(epochs)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("FLOAT_PATH_RESULT ")),
                None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"float path {name!r} failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-2000:]}")
    result = json.loads(line.split(" ", 1)[1])
    env_text = " ".join(f"{k}={v}" for k, v in env_add.items()) or "-"
    return {"path": name, "env": env_text, "threads": threads, "seed": seed, **result}


def available(name: str, paths: Mapping[str, tuple[dict[str, str], int, int]] = PATHS
              ) -> str | None:
    """None if this CPU can take path ``name``, else why not."""
    env_add = paths[name][0]
    if "AVX2" in env_add.values() or "avx2" in env_add.values():
        flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
        if " avx2" not in flags:
            return "this CPU has no AVX2"
    return None


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = "| " + " | ".join(FIELDS) + " |"
    lines = [head, "|" + "---|" * len(FIELDS)]
    for r in rows:
        cells = [f"{r[f]:.3f}" if isinstance(r[f], float) and f.endswith("acc") else str(r[f])
                 for f in FIELDS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m atat.lab.float_paths",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(PATHS),
                    help=f"comma-separated subset of {','.join(PATHS)}")
    ap.add_argument("--epochs", type=int, default=None,
                    help="train this many epochs instead of the demo's (a quick check)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench" / "float_paths.csv"))
    ap.add_argument("--cache", default=str(ROOT / "results" / "bench" / "cache"))
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    bad = sorted(set(names) - set(PATHS))
    if bad:
        ap.error(f"unknown float path(s) {bad}; choose from {list(PATHS)}")
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    work = cache / f"float-paths-{os.getpid()}"
    rows = []
    for name in names:
        why = available(name)
        if why:
            print(f"{name}: skipped ({why})", flush=True)
            continue
        rows.append(run_path(name, work=work, cache=cache, epochs=args.epochs))
        print(f"{name}: test {rows[-1]['test_acc']:.3f} val {rows[-1]['val_acc']:.3f} "
              f"digest {rows[-1]['digest']} ({rows[-1]['cpu_s']} CPU-s)", flush=True)
    from atat.base import io

    out = Path(args.out)
    io.write_csv_rows(out, [*FIELDS, "date"],
                      ({**{f: r[f] for f in FIELDS}, "date": time.strftime("%Y-%m-%d")}
                       for r in rows))
    print()
    print(format_table(rows))
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
