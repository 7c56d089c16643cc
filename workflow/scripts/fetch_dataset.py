"""Snakemake adapter: the raw files of a real dataset (FaceScrub, CelebA, Stanford Dogs)
downloaded, or found where they were placed by hand, and verified (rule fetch_dataset, on the
login node); output: the record atat.data.prepare.fetch_raw_record writes.

params: source, raw_dir, offline, lock_file (optional)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.data.prepare import fetch_raw_record  # noqa: E402
from atat.base.fetch import DEFAULT_LOCK_FILE  # noqa: E402

p = snakemake.params  # noqa: F821
fetch_raw_record(p.source, p.raw_dir, snakemake.output[0], offline=bool(p.offline),  # noqa: F821
                 lock_file=getattr(p, "lock_file", None) or DEFAULT_LOCK_FILE)
