"""Snakemake adapter: one model-inversion attack against one trained model (rule invert)."""

from _common import device, setup

setup(snakemake)  # noqa: F821

from atat.data.manifest import dataset_folder  # noqa: E402
from atat.inversion.run import run_inversion  # noqa: E402

sm = snakemake  # noqa: F821
inp, out, p = sm.input, sm.output, sm.params
perceptual = {k: inp.get(f"perceptual_{k}") for k in ("vgg", "lin", "embedding")
              if inp.get(f"perceptual_{k}")}
run_inversion(attack=p.ids["attack"], params=dict(p.attack), ids=dict(p.ids),
              model_path=inp.model, generator_path=inp.generator, evaluation_path=inp.evaluation,
              dataset_dir=dataset_folder(inp.dataset), face_path=inp.get("face"), faces=bool(p.faces),
              perceptual=perceptual, out_per_image=out.per_image, out_metrics=out.metrics,
              out_images=out.images, out_latents=out.latents, resume_dir=p.resume,
              device=device(), face_resolution=int(p.face["resolution"]),
              real_embeddings=inp.real_embeddings)
