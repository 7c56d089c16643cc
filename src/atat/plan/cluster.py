"""The cluster's settings and what a job asks the cluster for (torch-free; read when the DAG
is built).

**Settings file.** The SLURM partition's time limit and the GPU cards live in a YAML file of
their own, ``profiles/slurm/cluster.yaml`` by default (config key ``cluster_settings``: another
file, or ``none`` for no cluster settings), not in the profile's ``config:`` list: a
``--config`` on the command line replaces that whole list, while this file is merged key by
key -- ``--config max_runtime_min=1440`` changes the limit and keeps ``gpu_cards``. Keys
(:data:`CLUSTER_KEYS`): ``max_runtime_min`` (the GPU partition's limit in minutes),
``gpu_cards`` (the cards, below), ``gpu_card_resource`` (``gpu_model``: ``sbatch
--gpus=<card>:1``; ``constraint``: ``sbatch -C <card>``) and ``partitions``.

**Partitions.** ``partitions: {gpu: NAME, cpu: NAME}``, the one home of the partition names:
every job asks for the ``gpu`` one when it requests a GPU and for the ``cpu`` one otherwise --
a CPU rule's job, and a GPU rule's job that runs without a GPU (rule ``invert`` merging its
shards, anything under ``device: cpu``), which a GPU partition may refuse or bill as GPU time
(:func:`job_partition`; the workflow sets the resource ``slurm_partition`` of every rule from
it). Absent (or null): no partition is requested and SLURM uses its default one.

**Cards.** ``gpu_cards`` is ``"name=MB,name=MB@X.Y,..."`` or a mapping ``name: MB`` /
``name: "MB@X.Y"``: each card's memory in MiB and, optionally, its compute capability X.Y
(``nvidia-smi --query-gpu=compute_cap``). A card with a capability the installed torch build
has no kernels for is refused before any job is submitted (:func:`unsupported_cards`).

**Retries.** Attempt n of a job requests its first request x :data:`RETRY_GROWTH` ^ (n - 1)
minutes, rounded up to 10 and capped at ``max_runtime_min`` (:func:`retry_runtime_min`): a job
killed at its time limit is not resubmitted with the same limit. Out of GPU memory, its next
attempt asks for the next larger card (:func:`atat.plan.job_cost.pick_gpu_card`).

**Names.** Before the first submission, the partitions, GRES types and node features the jobs
request are compared with what ``sinfo`` lists (:func:`cluster_name_problems`): a misspelt name
would otherwise fail ``sbatch`` once per job and attempt.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

__all__ = ["CLUSTER_KEYS", "Card", "DEFAULT_SETTINGS_FILE", "PARTITION_KINDS", "RETRY_GROWTH",
           "SINFO_FORMAT", "check_gpu_cards", "cluster_name_problems", "GpuCardError",
           "job_partition", "load_cluster_settings", "parse_cards", "parse_sinfo",
           "retry_runtime_min", "unsupported_cards"]

CLUSTER_KEYS = ("max_runtime_min", "gpu_cards", "gpu_card_resource", "partitions")
#: the keys of ``partitions``
PARTITION_KINDS = ("gpu", "cpu")
#: relative to the repository (the workflow's base directory)
DEFAULT_SETTINGS_FILE = "profiles/slurm/cluster.yaml"
NO_SETTINGS = ("", "none", "null")
CARD_RESOURCES = ("gpu_model", "constraint")
#: growth of the runtime request per attempt
RETRY_GROWTH = 1.5
#: ``sinfo -h -o`` format: partition, generic resources, node features
SINFO_FORMAT = "%P|%G|%f"


@dataclasses.dataclass(frozen=True)
class Card:
    name: str
    mb: int
    capability: tuple[int, int] | None = None


def _card(name: str, value: Any, where: str) -> Card:
    text = str(value).strip()
    m = re.fullmatch(r"(\d+)\s*(?:@\s*(\d+)\.(\d+))?", text)
    if not name or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name) or not m:
        raise ValueError(f"{where}: expected name=MB or name=MB@X.Y (compute capability), "
                         f"got {name}={text!r}")
    cap = (int(m.group(2)), int(m.group(3))) if m.group(2) else None
    return Card(name, int(m.group(1)), cap)


def parse_cards(spec: Any, where: str = "gpu_cards") -> list[Card]:
    """``gpu_cards`` (module doc) -> cards by memory, smallest first."""
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return []
    if isinstance(spec, Mapping):
        cards = [_card(str(k), v, where) for k, v in spec.items()]
    else:
        cards = []
        for item in str(spec).split(","):
            name, sep, value = item.strip().partition("=")
            if not sep:
                raise ValueError(f"{where}: expected 'name=MB,name=MB', got {spec!r}")
            cards.append(_card(name.strip(), value, where))
    names = [c.name for c in cards]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: a card is listed twice ({', '.join(names)})")
    return sorted(cards, key=lambda c: c.mb)


def _check(settings: Mapping[str, Any], where: str) -> dict[str, Any]:
    out = dict(settings)
    unknown = sorted(set(out) - set(CLUSTER_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} (known: "
                         f"{', '.join(CLUSTER_KEYS)})")
    limit = out.get("max_runtime_min")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"{where}: max_runtime_min must be an integer >= 1 (minutes) or null, "
                         f"got {limit!r}")
    out["gpu_cards"] = parse_cards(out.get("gpu_cards"), f"{where}: gpu_cards")
    resource = out.get("gpu_card_resource") or "gpu_model"
    if resource not in CARD_RESOURCES:
        raise ValueError(f"{where}: gpu_card_resource must be one of "
                         f"{', '.join(CARD_RESOURCES)}, got {resource!r}")
    out["gpu_card_resource"] = resource
    out["partitions"] = _partitions(out.get("partitions"), f"{where}: partitions")
    return out


def _partitions(value: Any, where: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(map(str, value)) != set(PARTITION_KINDS):
        raise ValueError(f"{where}: expected a mapping with exactly the keys gpu and cpu "
                         f"(partition names, sinfo -s), got {value!r}")
    out = {}
    for kind in PARTITION_KINDS:
        name = str(value[kind]).strip()
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
            raise ValueError(f"{where}.{kind}: {value[kind]!r} is not a partition name")
        out[kind] = name
    return out


def job_partition(partitions: Mapping[str, str] | None, on_gpu: bool) -> str | None:
    """The partition a job asks for (module doc): the ``gpu`` one with a GPU, else ``cpu``;
    None without ``partitions``."""
    if not partitions:
        return None
    return partitions["gpu" if on_gpu else "cpu"]


def settings_file(config: Mapping[str, Any], basedir: str | Path) -> Path | None:
    """The cluster settings file ``config`` names (``cluster_settings``; default
    :data:`DEFAULT_SETTINGS_FILE`), or None for ``none``. A relative path is looked up in the
    working directory, then in ``basedir``."""
    value = config.get("cluster_settings", DEFAULT_SETTINGS_FILE)
    if value is None or str(value).strip().lower() in NO_SETTINGS:
        return None
    path = Path(str(value))
    if not path.is_absolute() and not path.exists():
        path = Path(basedir) / path
    return path


def load_cluster_settings(config: Mapping[str, Any], basedir: str | Path) -> dict[str, Any]:
    """The cluster settings: the file's (:func:`settings_file`), then every key of
    :data:`CLUSTER_KEYS` that ``config`` sets itself (``--config``, a config file) replacing
    the file's, key by key. ``gpu_cards`` comes back as a list of :class:`Card`. A missing or
    malformed file, an unknown key or a bad value is a ValueError naming the file and key."""
    path = settings_file(config, basedir)
    settings: dict[str, Any] = {}
    if path is not None:
        if not path.is_file():
            raise ValueError(f"cluster_settings: {path} does not exist (a YAML file with "
                             f"{', '.join(CLUSTER_KEYS)}; `--config cluster_settings=none` "
                             f"for none)")
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, Mapping):
            raise ValueError(f"{path}: expected a mapping of {', '.join(CLUSTER_KEYS)}")
        settings.update(data)
    settings.update({k: config[k] for k in CLUSTER_KEYS if k in config})
    return _check(settings, str(path) if path is not None else "cluster settings")


def retry_runtime_min(first_min: int, attempt: int, limit: int | None) -> int:
    """Minutes requested by attempt ``attempt`` of a job whose first attempt requests
    ``first_min`` (module doc)."""
    minutes = first_min if int(attempt) <= 1 else int(
        math.ceil(first_min * RETRY_GROWTH ** (int(attempt) - 1) / 10) * 10)
    return min(minutes, int(limit)) if limit and int(attempt) > 1 else minutes


# ---- jobs that fit no card ----------------------------------------------------------------------

class GpuCardError(ValueError):
    """Jobs of the config need more GPU memory than the largest card."""


def check_gpu_cards(jobs: Iterable[tuple[str, str, int, str, str]], cards: Sequence[Card]
                    ) -> None:
    """Refuse the jobs (rule, name, need MiB, shape, remedy) that fit no card: one message,
    grouped by rule and shape (count, need, an example job), with the remedies."""
    if not cards:
        return
    largest = max(cards, key=lambda c: c.mb)
    groups: dict[tuple[str, str, int], list[str]] = {}
    remedies: dict[str, set[str]] = {}
    for rule, name, need, shape, remedy in jobs:
        if need is not None and need > largest.mb:
            groups.setdefault((rule, shape, need), []).append(name)
            remedies.setdefault(rule, set()).add(remedy)
    if not groups:
        return
    n = sum(len(v) for v in groups.values())
    lines = [f"  {rule}: {len(names)} job(s), {shape}: {need} MB (e.g. {names[0]})"
             for (rule, shape, need), names in sorted(groups.items(), key=lambda g: (-g[0][2], g[0]))]
    hints = [f"{rule}: {', '.join(sorted(remedies[rule]))}" for rule in sorted(remedies)]
    raise GpuCardError(
        f"{n} GPU job(s) need more memory than the largest card of gpu_cards, {largest.name} "
        f"({largest.mb} MB); nothing was submitted:\n" + "\n".join(lines)
        + "\nRemedy: " + "; ".join(hints) + f"; or a larger card in gpu_cards (the cluster "
        f"settings, {DEFAULT_SETTINGS_FILE}). Estimates: atat.plan.gpu_memory, "
        f"atat.plan.inversion_resources.")


def unsupported_cards(cards: Sequence[Card], arch_list: Sequence[str]) -> list[str]:
    """The cards of ``gpu_cards`` whose compute capability a torch build with kernels
    ``arch_list`` cannot run on, each with why."""
    from atat.base.device import capability_supported

    return [f"{c.name} (compute capability {c.capability[0]}.{c.capability[1]}, "
            f"sm_{c.capability[0]}{c.capability[1]}): this torch build has kernels for "
            f"{' '.join(arch_list) or 'no GPU architecture'} only"
            for c in cards if c.capability is not None
            and not capability_supported(c.capability, list(arch_list))]


# ---- names sbatch would refuse ------------------------------------------------------------------

def parse_sinfo(text: str) -> dict[str, dict[str, set[str]]]:
    """``sinfo -h -o "%P|%G|%f"`` -> partition -> {"gres": GRES types and names, "features":
    node features} (the default partition's ``*`` removed; lines of a partition merged)."""
    out: dict[str, dict[str, set[str]]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if not parts[0]:
            continue
        part = out.setdefault(parts[0].rstrip("*"), {"gres": set(), "features": set()})
        gres = parts[1] if len(parts) > 1 else ""
        for item in re.split(r",(?![^(]*\))", gres):
            fields = re.sub(r"\(.*?\)", "", item).strip().split(":")
            if fields[0] and fields[0] != "(null)":
                part["gres"].add(fields[0])
                if len(fields) > 2 or (len(fields) == 2 and not fields[1].isdigit()):
                    part["gres"].add(fields[1])
        features = parts[2] if len(parts) > 2 else ""
        part["features"] |= {f for f in features.split(",") if f and f != "(null)"}
    return out


def cluster_name_problems(requests: Iterable[tuple[str, Any, Any, Any, Any]],
                          sinfo: Mapping[str, Mapping[str, set[str]]],
                          cards: Sequence[Card] = (), card_resource: str = "gpu_model"
                          ) -> list[str]:
    """What ``sbatch`` would refuse: each (rule, partition, gpu_model, constraint, gres) of the
    jobs checked against ``sinfo`` (:func:`parse_sinfo`) -- the partition exists, the GPU model
    is a GRES type of it, a plain constraint is a node feature of it; and every card of
    ``gpu_cards`` (a retry may ask for any) exists in a partition of the GPU jobs. One line per
    bad name, with the rules asking for it and what the cluster has."""
    bad: dict[str, set[str]] = {}

    def note(problem: str, rule: str) -> None:
        bad.setdefault(problem, set()).add(rule)

    gpu_partitions: set[str] = set()
    for rule, partition, gpu_model, constraint, gres in requests:
        partition = str(partition) if partition else None
        if partition is not None and partition not in sinfo:
            note(f"partition {partition!r} does not exist (sinfo lists: "
                 f"{', '.join(sorted(sinfo)) or 'none'})", rule)
            continue
        where = [sinfo[partition]] if partition else list(sinfo.values())
        label = f"partition {partition!r}" if partition else "any partition"
        if gpu_model or gres or (constraint and card_resource == "constraint"):
            gpu_partitions |= {partition} if partition else set(sinfo)
        if gpu_model and not any(str(gpu_model) in p["gres"] for p in where):
            note(f"GPU model {str(gpu_model)!r} is not a GRES type of {label} (it has: "
                 f"{', '.join(sorted(set().union(*(p['gres'] for p in where)))) or 'none'})",
                 rule)
        if gres:
            fields = str(gres).split(":")
            names = [f for f in fields[:2] if f and not re.fullmatch(r"\d+[TGM]?", f)]
            for name in names:
                if not any(name in p["gres"] for p in where):
                    note(f"GRES {name!r} (gres={gres}) is not offered by {label}", rule)
        if constraint and re.fullmatch(r"[A-Za-z0-9_.\-]+", str(constraint)) and not any(
                str(constraint) in p["features"] for p in where):
            note(f"constraint {str(constraint)!r} is not a node feature of {label} (it has: "
                 f"{', '.join(sorted(set().union(*(p['features'] for p in where)))) or 'none'})",
                 rule)
    key = "gres" if card_resource == "gpu_model" else "features"
    for card in cards:
        where = [sinfo[p] for p in sorted(gpu_partitions) if p in sinfo] or list(sinfo.values())
        if where and not any(card.name in p[key] for p in where):
            what = "GRES type" if key == "gres" else "node feature"
            note(f"gpu_cards lists {card.name!r}, which is not a {what} of the GPU partition(s) "
                 f"{', '.join(sorted(gpu_partitions)) or '(any)'}", "gpu_cards")
    return [f"{problem} -- requested by {', '.join(sorted(rules))}"
            for problem, rules in sorted(bad.items())]
