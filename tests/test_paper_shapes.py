"""Paper-shapes tier (issue 13 item 17, marker ``paper_shapes``; ``make test-paper-shapes``).

The paper config's rules at the paper's real shapes, through Snakemake, on CPU: 224 px
ResNet-152 / DenseNet-169 / ResNet-18 target models from ImageNet weight files, Inception-v3
at 299 px with its aux head, FaceNet (InceptionResnetV1) at 160 px, VGG16-LPIPS, and the
1024 px FFHQ / 512 px AFHQ-Dog StyleGAN2-ADA architectures -- with random weights and
fabricated images, because none of the real files can be fetched here. What a change can break
at these shapes (a layer name of a real weight file, a crop of a 1024 px image, a head size, an
aux-logit branch, a float16 layer) breaks this test.

:func:`fabricate_paper_inputs` writes every input the download and preparation rules would
produce, in the real files' formats, where those rules put them (``offline: true`` in the
overlay, so nothing is fetched and no download job runs):

* ``resources/datasets/<facescrub|celeba|stanford_dogs>/private``: the project's dataset
  format (manifest.csv + meta.json, the split rule of atat.data.prepare) with random images
  of varied sizes, as the prepared datasets have (meta resolution null);
* ``resources/weights/torchvision/<file>``: randomly initialised torchvision state dicts under
  torchvision's file names, DenseNet-169 with the old ``norm.1``-style keys of the published
  file;
* ``resources/weights/stylegan2/{ffhq,afhqdog}.pkl``: NVIDIA's pickle layout (G, D, G_ema)
  with the official FFHQ 1024 px / AFHQ-Dog 512 px architectures;
* ``resources/weights/facenet/20180402-114759-vggface2.pt``: an InceptionResnetV1 state dict
  with the 8631-class VGGFace2 head, as facenet-pytorch publishes it;
* ``resources/weights/lpips/vgg_v0.1.pth``: the LPIPS v0.1 VGG linear layers.

The overlay (``.test/paper-shapes/config.yaml``) keeps config/config.yaml's shapes and cuts
only budgets, class counts and the grid: one model per architecture and per dataset kind
(FaceScrub ResNet-152 NoDef, CelebA DenseNet-169 AT-AT, Stanford Dogs ResNet-18 NoDef), each
trained, attacked by AutoAttack at every epsilon, measured for HSIC and inverted by PPA,
IF-GMI and PPDG; then the summary, the per-image table, the tables and figures ``all`` has
for these models. Not covered: the statistics rules (regressions, cost of privacy, causal
experiment, Figure 2), which need more models than a CPU run can train; their inputs are
tables, whose shapes do not depend on the image sizes (test_stats_*.py, test_workflow.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from atat.plan.config import load_config
from atat.plan.weights_table import torchvision_weights_filename

ROOT = Path(__file__).resolve().parents[1]
OVERLAY = ROOT / ".test" / "paper-shapes" / "config.yaml"

pytestmark = [pytest.mark.paper_shapes, pytest.mark.slow]

# The official priors (StyleGAN2-ADA's FFHQ 1024 px and AFHQ-Dog 512 px networks share the
# generator architecture atat.inversion.stylegan2.OFFICIAL_PRIOR_KWARGS); D resnet with
# minibatch-std groups 4 (ffhq) / 8 (afhqdog).
PRIORS = {"ffhq": (1024, 4), "afhqdog": (512, 8)}
IMAGES_PER_CLASS = 8


def _save(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path)


def _densenet_published_keys(state: dict) -> dict:
    """torchvision's published DenseNet files (PyTorch < 0.4.1) name the dense layers' modules
    ``norm.1`` etc. (torchvision.models.densenet._load_state_dict renames them when it loads
    one) and have no BatchNorm ``num_batches_tracked`` buffers."""
    pattern = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))((?:[12])\.(?:weight|bias|"
                         r"running_mean|running_var))$")
    return {(f"{m.group(1)}.{m.group(2)}" if (m := pattern.match(k)) else k): v
            for k, v in state.items() if not k.endswith("num_batches_tracked")}


def _fabricate_dataset(root: Path, name: str, n_classes: int, split_seed: int, rng) -> None:
    from PIL import Image

    from atat.data.manifest import split_indices, write_dataset, write_stamp

    private = root / "private"
    rows = []
    for label in range(n_classes):
        d = private / "images" / f"class_{label:03d}"
        d.mkdir(parents=True, exist_ok=True)
        for i in range(IMAGES_PER_CLASS):
            h, w = (int(v) for v in rng.integers(160, 320, size=2))
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(d / f"{i}.png")
            rows.append((f"images/class_{label:03d}/{i}.png", label))
    df = pd.DataFrame(rows, columns=["path", "label"])
    df["identity"] = [f"{name}_identity_{lab}" for lab in df["label"]]
    df["split"] = ""
    for split, idx in split_indices(len(df), seed=split_seed).items():
        df.loc[idx, "split"] = split
    write_dataset(private, df, {"name": name, "source": name, "resolution": None,
                                "class_names": [f"{name}_identity_{c}" for c in range(n_classes)],
                                "split_seed": split_seed, "pool": "private"})
    write_stamp(root)  # what rule prepare_dataset writes last: the jobs' declared input


def _torchvision_state(arch: str, weights: str) -> dict:
    import torchvision

    kwargs = {"aux_logits": True, "init_weights": False} if arch == "inception_v3" else {}
    net = torchvision.models.get_model(arch, weights=None, **kwargs)
    state = net.state_dict()
    return _densenet_published_keys(state) if arch.startswith("densenet") else state


def _stylegan_pickle(path: Path, resolution: int, mbstd_group: int) -> None:
    from atat.inversion.safe_pickle import save_stylegan_pickle
    from atat.inversion.stylegan2 import OFFICIAL_PRIOR_KWARGS, Discriminator, Generator

    torch.manual_seed(resolution)
    G = Generator(img_resolution=resolution, **OFFICIAL_PRIOR_KWARGS).eval().requires_grad_(False)
    D = Discriminator(c_dim=0, img_resolution=resolution, img_channels=3, architecture="resnet",
                      channel_base=32768, channel_max=512, num_fp16_res=4, conv_clamp=256,
                      epilogue_kwargs=dict(mbstd_group_size=mbstd_group))
    path.parent.mkdir(parents=True, exist_ok=True)
    save_stylegan_pickle(path, G, G=G, D=D)


def fabricate_paper_inputs(workdir: Path, config: dict) -> None:
    """Every file the download/prepare rules would produce for ``config``, in its real format."""
    from facenet_pytorch.models.inception_resnet_v1 import InceptionResnetV1

    from atat.downloads import LPIPS_VGG_CHANNELS

    rng = np.random.default_rng(0)
    res = workdir / config["resources_dir"]
    used = {ds for cell in config["grid"] for ds in cell["datasets"]}
    for name in sorted(used):
        _fabricate_dataset(res / "datasets" / name, config["datasets"][name]["source"],
                           int(config["datasets"][name]["n_classes"]), int(config["split_seed"]), rng)
    wanted = {(a, config["architectures"][a].get("weights", "IMAGENET1K_V1"))
              for cell in config["grid"] for a in cell["architectures"]}
    ev = config["evaluation_model"]
    wanted |= {(ev["architecture"], ev["weights"]), ("vgg16", "IMAGENET1K_V1")}
    for arch, weights in sorted(wanted):
        _save(_torchvision_state(arch, weights),
              res / "weights" / "torchvision" / torchvision_weights_filename(arch, weights))
    for gen in sorted({config["datasets"][ds]["generator"] for ds in used}):
        _stylegan_pickle(res / "weights" / "stylegan2" / f"{gen}.pkl", *PRIORS[gen])
    net = InceptionResnetV1(pretrained=None, classify=False)
    state = dict(net.state_dict())
    head = torch.nn.Linear(512, 8631)
    state.update({"logits.weight": head.weight.detach(), "logits.bias": head.bias.detach()})
    _save(state, res / "weights" / "facenet" / Path(config["face_embedding"]["url"]).name)
    _save({f"lin{k}.model.1.weight": torch.rand(1, c, 1, 1) / c
           for k, c in enumerate(LPIPS_VGG_CHANNELS)}, res / "weights" / "lpips" / "vgg_v0.1.pth")


@pytest.fixture
def paper_workdir(tmp_path):
    config = load_config(ROOT / "config" / "config.yaml", OVERLAY)
    fabricate_paper_inputs(tmp_path, config)
    return tmp_path, config


def test_paper_grid_rules_at_paper_shapes(paper_workdir):
    workdir, config = paper_workdir
    cmd = [sys.executable, "-m", "snakemake", "all", "-s", str(ROOT / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(OVERLAY), "--cores", "2",
           "--keep-going", "--show-failed-logs", "--set-threads", "train_model=1",
           "train_evaluation_model=1", "autoattack=1", "invert=1", "measure_hsic=1"]
    # nothing may be fetched or prepared: every such job's output was fabricated above
    dry = subprocess.run([*cmd, "-n"], capture_output=True, text=True, timeout=600)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    for rule in ("prepare_dataset", "torchvision_weights", "stylegan_weights", "facenet_weights",
                 "lpips_weights"):
        assert f"rule {rule}:" not in dry.stdout, f"{rule} would run"
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3 * 3600)
    wall = time.monotonic() - t0
    (workdir / "wall_seconds.txt").write_text(f"{wall:.0f}\n")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]

    models = {("facescrub", "resnet152", "nodef"), ("celeba", "densenet169", "atat"),
              ("stanford_dogs", "resnet18", "nodef")}
    summary = pd.read_csv(workdir / "results" / "summary.csv")
    assert set(zip(summary["dataset"], summary["architecture"], summary["defense"])) == models
    for ds, arch, defense in models:
        inv = workdir / "results" / "inversion" / ds / arch / defense / "seed0"
        for attack in ("ppa", "ifgmi", "ppdg"):
            params = json.loads((inv / attack / "metrics.json").read_text())["params"]
            assert params["input_resolution"] == 224  # the target model's input size
            assert params["center_crop"] == (800 if ds != "stanford_dogs" else None)
        hsic = workdir / "results" / "hsic" / ds / arch / defense / "seed0.json"
        assert json.loads(hsic.read_text())
    per_image = pd.read_csv(workdir / "results" / "inversion" / "per_image.csv")
    assert set(per_image["attack"]) == {"ppa", "ifgmi", "ppdg"}
    assert per_image.loc[per_image["dataset"] != "stanford_dogs", "dist_face"].notna().all()
    for table in ("table1", "table4", "table11", "table14", "table23", "table24", "table26"):
        assert (workdir / "results" / "tables" / f"{table}.md").read_text().strip()
    for fig in ("robust_accuracy_vs_eps", "figure4_accuracy_vs_privacy",
                "figure5_adversarial_examples", "reconstructions_facescrub_resnet152_ppdg"):
        assert (workdir / "results" / "figures" / f"{fig}.png").read_bytes()[:4] == b"\x89PNG"
