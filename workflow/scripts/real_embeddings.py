"""Snakemake adapter: the inversion scorer's features of a dataset's private training images,
once for all of its inversion jobs (rule real_embeddings)."""

from _common import device, setup

setup(snakemake)  # noqa: F821

from atat.data.manifest import dataset_folder  # noqa: E402
from atat.inversion.run import write_real_embeddings  # noqa: E402

sm = snakemake  # noqa: F821
inp, p = sm.input, sm.params
write_real_embeddings(evaluation_path=inp.evaluation, dataset_dir=dataset_folder(inp.dataset),
                      face_path=inp.get("face") or None, faces=bool(p.faces),
                      out_path=sm.output[0], device=device(),
                      face_resolution=int(p.face["resolution"]))
