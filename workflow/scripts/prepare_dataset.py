"""Snakemake adapter: verify and convert a real dataset (FaceScrub, CelebA, Stanford Dogs) into
the manifest format (rule prepare_dataset, a compute job) from the raw files that rule
fetch_dataset downloaded and recorded (input.fetched).

params: source, raw_dir, split_seed, n_classes, offline (optional: lock_file);
output.folder: the dataset directory (the dataset root is output.folder/private);
output.stamp: its stamp (atat.data.manifest.write_stamp), written last."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.data.manifest import write_stamp  # noqa: E402
from atat.data.prepare import prepare_dataset  # noqa: E402
from atat.base.fetch import DEFAULT_LOCK_FILE  # noqa: E402

p = snakemake.params  # noqa: F821
prepare_dataset(
    p.source,
    raw_dir=p.raw_dir,
    out_dir=snakemake.output.folder,  # noqa: F821
    split_seed=int(p.split_seed),
    n_classes=None if p.n_classes is None else int(p.n_classes),
    offline=bool(p.offline),
    lock_file=getattr(p, "lock_file", None) or DEFAULT_LOCK_FILE,
    workers=max(1, int(snakemake.threads)),  # noqa: F821
    overwrite=True,  # Snakemake has removed any old output before the job starts
    fetched=snakemake.input.fetched,  # noqa: F821
)
stamp = write_stamp(snakemake.output.folder)  # noqa: F821
assert str(stamp) == snakemake.output.stamp, (stamp, snakemake.output.stamp)  # noqa: F821
