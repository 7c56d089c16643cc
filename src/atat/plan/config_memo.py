"""Validate a config once per (config, code) instead of on every Snakemake start.

:func:`atat.plan.config.validate_config` is a pure function of the config, the JSON schema and
this package's code, but checking the defense parameters imports every defense module and
with them torch and torchvision (~5 s on 2 cores), which made every dry run slow. The
workflow therefore calls :func:`validate_config_once`: it runs the full validation and, when
it passes, leaves an empty marker named by the fingerprint of everything the validation
depends on. The next start with the same config and code finds the marker and skips it;
any edit of the config, the schema or a module under ``src/atat`` changes the fingerprint,
so the check runs again. A failed validation leaves no marker.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the atat package
SCHEMA_PATH = PACKAGE_DIR.parents[1] / "workflow" / "schemas" / "config.schema.yaml"
#: markers kept per cache directory (older ones are removed)
KEEP = 32


def fingerprint(config: Mapping[str, Any]) -> str:
    """sha256 of the config (canonical JSON), the schema and every module of the package."""
    h = hashlib.sha256()
    h.update(json.dumps(config, sort_keys=True, default=repr).encode())
    for path in [SCHEMA_PATH, *sorted(PACKAGE_DIR.rglob("*.py"))]:
        h.update(b"\0" + str(path.relative_to(PACKAGE_DIR.parents[1])).encode() + b"\0")
        h.update(path.read_bytes() if path.exists() else b"<missing>")
    return h.hexdigest()


def validate_config_once(config: Mapping[str, Any], cache_dir: str | os.PathLike[str]) -> bool:
    """Validate ``config`` unless this exact config and code passed before (a marker under
    ``cache_dir``). Returns True when the validation ran. Raises what validate_config
    raises (:class:`atat.plan.config.ConfigError`)."""
    cache = Path(cache_dir)
    marker = cache / fingerprint(config)
    if marker.exists():
        return False
    from atat.plan.config import validate_config

    validate_config(config)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        marker.touch()
        for old in sorted(cache.iterdir(), key=lambda p: p.stat().st_mtime)[:-KEEP]:
            old.unlink(missing_ok=True)
    except OSError:  # a read-only working directory: validate every time
        pass
    return True
