"""Snakemake adapter of the model-inversion jobs of one (model, attack): rule invert over every
class, rule invert_shard over a range of them, or rule invert merging the ranges' parts."""

from _common import device, setup

setup(snakemake)  # noqa: F821

from atat.data.manifest import dataset_folder  # noqa: E402
from atat.base.io import torch_load  # noqa: E402
from atat.inversion.run import invert_class_range, merge_inversion, run_inversion  # noqa: E402

sm = snakemake  # noqa: F821
inp, out, p = sm.input, sm.output, sm.params
outputs = dict(out_per_image=out.get("per_image"), out_metrics=out.get("metrics"),
               out_images=out.get("images"), out_latents=out.get("latents"))
if inp.get("parts"):  # rule invert of a sharded (model, attack): merge the ranges
    parts = [torch_load(f) for f in inp.parts]
    merge_inversion(parts, attack=p.ids["attack"], params=dict(p.attack), ids=dict(p.ids),
                    **outputs)
else:
    perceptual = {k: inp.get(f"perceptual_{k}") for k in ("vgg", "lin", "embedding")
                  if inp.get(f"perceptual_{k}")}
    job = dict(attack=p.ids["attack"], params=dict(p.attack), model_path=inp.model,
               generator_path=inp.generator, evaluation_path=inp.evaluation,
               dataset_dir=dataset_folder(inp.dataset), face_path=inp.get("face"), faces=bool(p.faces),
               perceptual=perceptual, resume_dir=p.resume, device=device(),
               face_resolution=int(p.face["resolution"]), real_embeddings=inp.real_embeddings)
    if out.get("part"):  # rule invert_shard
        invert_class_range(out_part=out.part, class_range=(int(sm.wildcards.start),
                                                           int(sm.wildcards.stop)), **job)
    else:
        run_inversion(ids=dict(p.ids), **outputs, **job)
