"""Networks that judge an inversion attack (docs/sources.md#evaluation-model, #facenet-distance).

* The **evaluation model** (docs/sources.md#evaluation-model): torchvision Inception-v3 trained on
  the private training split (the 72% subset) of the attacked dataset. ImageNet-initialised from a
  local weights file when pretrained (torchvision then uses ``transform_input=True``: the [-1, 1]
  inputs are re-mapped to ImageNet normalisation inside the network), else trained from scratch
  (``init_weights=True``). ``fc`` is replaced by ``Linear(2048, n_classes)`` and split off as
  the classification head; the rest gives the 2048-d pooled features of δ_eval
  (docs/sources.md#evaluation-model-distance). The auxiliary head (when ``aux_logits``) keeps its
  1000-way fc and is trained with the identity labels; loss = CE_sum(main) + CE_sum(aux).
  ``evaluation_model.architecture`` may instead name a target architecture
  (:data:`atat.training.models.ARCHITECTURES`; the miniature's judge: DenseNet-47 fine-tuned
  from its pretraining, docs/decisions.md#the-evaluation-models-architecture): the classifier of
  :func:`atat.training.models.build_model`, its penultimate features δ_eval's, no auxiliary head.
* The **face embedding** of δ_face (docs/sources.md#facenet-distance): either facenet-pytorch's
  ``InceptionResnetV1`` (VGGFace2 weights from a local file, unit-norm 512-d output, [-1, 1] inputs
  fed directly) or, where no pretrained face network is available (embedded demo), a ResNet-18
  trained on the attacker's public pool (identities disjoint from the private ones) whose
  L2-normalised penultimate features serve as the embedding; ImageNet-style initialised from a
  pretrained backbone where ``face_embedding.pretrained`` (the demo: the miniature's
  pretraining, :mod:`atat.training.pretrain`).

Both train through the one training loop, :func:`atat.training.train.fit` (resumable). Every model
takes images in [-1, 1]. Checkpoints are written atomically (:mod:`atat.base.io`).
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
import torchvision
from torch import Tensor, nn
from torch.utils.data import DataLoader, Subset

from atat.base import io
from atat.data.loading import ManifestDataset, build_transform, make_loader
from atat.data.manifest import read_meta
from atat.plan.inversion_defaults import EVAL_TRAINING_DEFAULTS
from atat.training.models import (EVALUATION_ARCHITECTURE, Classifier, build_model,
                                  load_pretrained)
from atat.training.pretrain import CrossEntropy
from atat.training.train import evaluate, fingerprint, seed_everything, versions
from atat.training.train import fit as train_loop

log = logging.getLogger(__name__)

__all__ = [
    "EVAL_TRAINING_DEFAULTS",
    "ClassifierEvaluationModel",
    "EvaluationModel",
    "FaceEmbedding",
    "build_evaluation_model",
    "eval_augmentation",
    "load_evaluation_model",
    "load_face_network",
    "load_facenet",
    "public_holdout_split",
    "train_evaluation_model",
    "train_face_embedding",
]

FORMAT_VERSION = 1
FEATURE_DIM = 2048
#: share of each public identity's images held out to validate the demo face embedding
FACE_HOLDOUT_FRACTION = 0.1


# ============================================== evaluation model (docs/sources.md#evaluation-model)
class EvaluationModel(nn.Module):
    """Inception-v3 split into feature extractor (``net`` with ``fc = Identity``) and head.

    ``features(x)`` → [N, 2048] pooled features (dropout inactive in eval mode);
    ``forward(x)`` → [N, n_classes] logits; ``forward_train(x)`` → (logits, aux logits or
    None). Inputs are images in [-1, 1] at ``resolution`` (≥ 75 px)."""

    def __init__(self, net: torchvision.models.Inception3, n_classes: int, resolution: int = 299):
        super().__init__()
        net.fc = nn.Identity()
        self.net = net
        self.head = nn.Linear(FEATURE_DIM, n_classes)
        self.n_classes = int(n_classes)
        self.resolution = int(resolution)

    @property
    def aux_logits(self) -> bool:
        return bool(self.net.aux_logits)

    @property
    def transform_input(self) -> bool:
        return bool(self.net.transform_input)

    def _net(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        out = self.net(x)
        if isinstance(out, tuple):  # InceptionOutputs(logits=features, aux_logits) in train mode
            return out[0], out[1]
        return out, None

    def features(self, x: Tensor) -> Tensor:
        return self._net(x)[0]

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))

    def forward_train(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        feats, aux = self._net(x)
        return self.head(feats), aux


class ClassifierEvaluationModel(nn.Module):
    """A target architecture's classifier as evaluation model (``evaluation_model.architecture``
    other than Inception-v3), with :class:`EvaluationModel`'s interface: ``features(x)`` the
    penultimate features, ``forward(x)`` the logits, ``forward_train(x)`` → (logits, None); no
    auxiliary head and no input transform; ``head`` is the classifier's. Inputs are images in
    [-1, 1] at ``resolution``."""

    aux_logits = False
    transform_input = False

    def __init__(self, classifier: Classifier, resolution: int):
        super().__init__()
        self.classifier = classifier
        self.n_classes = int(classifier.head.out_features)
        self.resolution = int(resolution)

    @property
    def architecture(self) -> str:
        return self.classifier.architecture

    @property
    def head(self) -> nn.Linear:
        return self.classifier.head

    def features(self, x: Tensor) -> Tensor:
        return self.classifier.features(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(x)

    def forward_train(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        return self.classifier(x), None


def build_evaluation_model(n_classes: int, *, architecture: str = EVALUATION_ARCHITECTURE,
                           aux_logits: bool = True,
                           weights_path: str | Path | None = None,
                           transform_input: bool | None = None,
                           resolution: int = 299) -> EvaluationModel | ClassifierEvaluationModel:
    """The evaluation model: Inception-v3 (``architecture`` ``inception_v3``, the paper's) or a
    target architecture's classifier (:class:`ClassifierEvaluationModel`, which takes neither
    ``aux_logits`` nor ``transform_input``).

    Inception-v3: ``weights_path``: a pretrained Inception-v3 state dict on
    disk (torchvision's ImageNet ``inception_v3_google-*.pth`` on the paper config, the
    miniature's pretraining on the demo, both through
    :func:`atat.training.models.load_pretrained`; never downloaded here) →
    ``transform_input=True`` and ``init_weights=False`` as torchvision does with
    ``weights=IMAGENET1K_V1``; ``None`` → random ``init_weights=True`` initialisation.
    ``transform_input`` overrides the default (used when rebuilding a trained checkpoint)."""
    pretrained = weights_path is not None
    if architecture != EVALUATION_ARCHITECTURE:
        if aux_logits or transform_input:
            raise ValueError(f"evaluation model {architecture}: aux_logits and transform_input "
                             f"exist only for {EVALUATION_ARCHITECTURE}")
        return ClassifierEvaluationModel(build_model(architecture, n_classes, weights_path),
                                         resolution)
    if transform_input is None:
        transform_input = pretrained
    # the 1000-way fc/AuxLogits.fc of ImageNet; fc is replaced below, the aux fc kept
    # (docs/sources.md#evaluation-model)
    net = torchvision.models.Inception3(num_classes=1000, aux_logits=True,
                                        transform_input=bool(transform_input),
                                        init_weights=not pretrained)
    if pretrained:
        # without the auxiliary head, a file's AuxLogits tensors (ImageNet's) are not needed
        load_pretrained(net, weights_path, what="the evaluation model (Inception-v3)",
                        removed=() if aux_logits else ("AuxLogits.",))
    if not aux_logits:
        net.aux_logits = False
        net.AuxLogits = None
    return EvaluationModel(net, n_classes, resolution)


def eval_augmentation(aug: Mapping[str, Any] | None) -> dict[str, Any]:
    """Translate the config's ``evaluation_model.augmentation`` ({rrc_scale, flip,
    color_jitter: {...}}) into :func:`atat.data.loading.build_transform`'s ``aug``."""
    aug = dict(aug or {})
    out: dict[str, Any] = {}
    if "rrc_scale" in aug:
        out["random_resized_crop"] = aug["rrc_scale"] is not None
        if aug["rrc_scale"] is not None:
            out["rrc_scale"] = list(aug["rrc_scale"])
    if "flip" in aug:
        p = float(aug["flip"])
        if p not in (0.0, 0.5):
            raise ValueError(f"evaluation_model.augmentation.flip must be 0 or 0.5, got {p}")
        out["horizontal_flip"] = p > 0
    if "color_jitter" in aug:
        jitter = aug["color_jitter"]
        out["color_jitter"] = bool(jitter)
        if jitter:
            out["jitter"] = dict(jitter)
    return out


#: the evaluation networks' training method: plain summed cross-entropy (one home,
#: atat.training.pretrain, shared with the pretrained backbones)
_CrossEntropy = CrossEntropy


def _recipe(training: Mapping[str, Any] | None) -> dict[str, Any]:
    p = {**EVAL_TRAINING_DEFAULTS, **dict(training or {})}
    if any(m >= p["epochs"] for m in p["lr_milestones"]):  # validate_config says which key
        raise ValueError(f"training.lr_milestones {p['lr_milestones']}: every milestone must "
                         f"be < epochs = {p['epochs']}")
    return p


def _check_batches(loader: DataLoader, name: str, batch_size: int) -> None:
    if len(loader) == 0:
        raise ValueError(f"{name}: the training split has fewer images than one batch "
                         f"({batch_size})")


def _eval_model_loss(model: EvaluationModel, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    logits, aux = model.forward_train(x)
    loss = F.cross_entropy(logits, y, reduction="sum")
    if aux is not None:
        loss = loss + F.cross_entropy(aux, y, reduction="sum")
    return loss, logits


def train_evaluation_model(dataset_root: str | Path, *, out_model: str | Path,
                           out_metrics: str | Path, n_classes: int, resolution: int = 299,
                           architecture: str = EVALUATION_ARCHITECTURE,
                           aux_logits: bool = True, weights_path: str | Path | None = None,
                           training: Mapping[str, Any] | None = None,
                           augmentation: Mapping[str, Any] | None = None, seed: int = 42,
                           num_workers: int = 0, device: str | torch.device = "cpu",
                           progress: bool = True, resume_path: str | Path | None = None,
                           stop_after_epochs: int | None = None) -> dict[str, Any] | None:
    """Train the evaluation model on ``dataset_root`` (a private dataset: train/val/test) as
    docs/sources.md#evaluation-model: train loader shuffled with ``drop_last``, the config's
    augmentation, Adam, MultiStepLR per epoch, CE_sum(main) + CE_sum(aux), lowest-validation-loss
    checkpoint, all through the one training loop (:func:`atat.training.train.fit`; resumable from
    ``resume_path``). Writes the checkpoint (see :func:`load_evaluation_model`) and a metrics
    JSON with the train (un-augmented), validation and test accuracies; returns the metrics
    (None when ``stop_after_epochs`` interrupted the run, as in :func:`atat.training.train.train`)."""
    device = torch.device(device)
    p = _recipe(training)
    seed_everything(seed)
    loader_gen = torch.Generator().manual_seed(seed)
    model = build_evaluation_model(n_classes, architecture=architecture, aux_logits=aux_logits,
                                   weights_path=weights_path, resolution=resolution).to(device)
    aug = eval_augmentation(augmentation)
    common = dict(resolution=resolution, num_workers=num_workers)
    train_loader = make_loader(dataset_root, "train", batch_size=p["batch_size"], train=True,
                               aug=aug, generator=loader_gen, **common)
    n_data = train_loader.dataset.n_classes
    if n_data != n_classes:
        raise ValueError(f"{dataset_root} has {n_data} classes, the evaluation model {n_classes}")
    val_loader = make_loader(dataset_root, "val", batch_size=p["batch_size"], train=False,
                             **common)
    test_loader = make_loader(dataset_root, "test", batch_size=p["batch_size"], train=False,
                              **common)
    _check_batches(train_loader, "evaluation model", p["batch_size"])
    settings = {"kind": "evaluation_model", "dataset_root": str(dataset_root),
                "architecture": architecture,
                "n_classes": int(n_classes), "resolution": int(resolution),
                "aux_logits": bool(aux_logits),
                "weights_path": None if weights_path is None else str(weights_path),
                "training": p, "augmentation": aug, "seed": int(seed),
                "num_workers": int(num_workers)}
    fit = train_loop(model, _CrossEntropy(_eval_model_loss), name="evaluation model",
                     n_classes=n_classes, recipe=p, train_loader=train_loader,
                     val_loader=val_loader, loader_gen=loader_gen, resume_path=resume_path,
                     fingerprint=fingerprint(settings), device=device,
                     stop_after_epochs=stop_after_epochs, progress=progress)
    if fit is None:
        return None
    best = fit["best"]
    clean_train = make_loader(dataset_root, "train", batch_size=p["batch_size"], train=False,
                              **common)
    train_eval = evaluate(model, _CrossEntropy(), clean_train, device)
    test = evaluate(model, _CrossEntropy(), test_loader, device)
    checkpoint = {
        "format_version": FORMAT_VERSION, "kind": "evaluation_model",
        "architecture": architecture, "n_classes": int(n_classes),
        "resolution": int(resolution), "aux_logits": bool(aux_logits),
        "transform_input": model.transform_input, "pretrained": weights_path is not None,
        "state_dict": best["model"], "best_epoch": best["epoch"],
    }
    metrics = {
        "architecture": architecture, "n_classes": int(n_classes), "resolution": int(resolution),
        "aux_logits": bool(aux_logits), "pretrained": weights_path is not None,
        "transform_input": model.transform_input, "seed": int(seed),
        "best_epoch": best["epoch"], "train_loss": train_eval["loss"],
        "train_acc": train_eval["acc"], "val_loss": best["val_loss"], "val_acc": best["val_acc"],
        "test_loss": test["loss"], "test_acc": test["acc"], "test_top5": test["top5"],
        "n_train": train_eval["n"], "n_test": test["n"], "train_seconds": fit["train_seconds"],
        # the accuracy on private images it never trained on (the test split): the
        # preconditions' evaluation-model row (docs/sources.md#evaluation-model-accuracy)
        "heldout_acc": test["acc"], "n_heldout": test["n"], "heldout_split": "test",
        "training": p, "augmentation": aug, "history": fit["history"], "device": str(device),
        "versions": versions(),
    }
    io.torch_save(checkpoint, out_model)
    io.write_json(out_metrics, metrics)
    log.info("evaluation model: train acc %.4f, val acc %.4f, test acc %.4f (best epoch %d)",
             metrics["train_acc"], metrics["val_acc"], metrics["test_acc"], best["epoch"])
    return metrics


def load_evaluation_model(path: str | Path, device: str | torch.device = "cpu"
                          ) -> EvaluationModel | ClassifierEvaluationModel:
    """Rebuild a trained evaluation model (eval mode) from :func:`train_evaluation_model`'s
    checkpoint; ``model.resolution`` / ``model.n_classes`` tell its input size and classes."""
    ckpt = io.torch_load(path)
    if ckpt.get("kind") != "evaluation_model":
        raise ValueError(f"{path} is not an evaluation-model checkpoint")
    model = build_evaluation_model(ckpt["n_classes"],
                                   architecture=ckpt.get("architecture", EVALUATION_ARCHITECTURE),
                                   aux_logits=ckpt["aux_logits"],
                                   transform_input=ckpt["transform_input"],
                                   resolution=ckpt["resolution"])
    model.load_state_dict(ckpt["state_dict"])
    return model.to(device).eval()


# ================================================ face embedding (docs/sources.md#facenet-distance)
class FaceEmbedding(nn.Module):
    """Unit-norm penultimate features of a classifier trained on the public identities."""

    def __init__(self, classifier: Classifier, resolution: int):
        super().__init__()
        self.classifier = classifier
        self.resolution = int(resolution)

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(self.classifier.features(x), p=2, dim=1)


#: FaceNet's input size (facenet-pytorch / docs/sources.md#facenet-distance);
#: ``face_embedding.resolution`` default.
FACENET_RESOLUTION = 160


def _require_face_file(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(
            f"face-embedding network not found: {path} (face_embedding.source facenet: the "
            f"VGGFace2 InceptionResnetV1 state dict from face_embedding.url, rule "
            f"facenet_weights; public_classifier: rule train_face_embedding)")


def load_facenet(weights_path: str | Path, device: str | torch.device = "cpu",
                 resolution: int | None = None) -> nn.Module:
    """facenet-pytorch ``InceptionResnetV1(pretrained=None, classify=False)`` with the state
    dict of ``weights_path`` (e.g. ``20180402-114759-vggface2.pt``; its 8631-way ``logits``
    layer is dropped, it is unused with ``classify=False``). Eval mode; maps [-1, 1] images
    to unit-norm 512-d embeddings. ``resolution`` (config ``face_embedding.resolution``): the
    size attack and real images are resized to (``net.resolution``; default 160 as in
    docs/sources.md#facenet-distance, the network's average pooling accepts other sizes)."""
    from facenet_pytorch import InceptionResnetV1  # slow import (pulls in MTCNN & co.)

    path = Path(weights_path)
    _require_face_file(path)
    state = io.torch_load(path, advice=io.DOWNLOAD_ADVICE)
    state = {k: v for k, v in state.items() if not k.startswith("logits.")}
    net = InceptionResnetV1(pretrained=None, classify=False)
    net.load_state_dict(state)
    net.resolution = int(resolution) if resolution is not None else FACENET_RESOLUTION
    return net.to(device).eval()


def load_face_network(path: str | Path, device: str | torch.device = "cpu",
                      resolution: int | None = None) -> nn.Module:
    """The face network of δ_face from ``path``: a public-classifier checkpoint of
    :func:`train_face_embedding`, or a FaceNet state dict (see :func:`load_facenet`).
    ``resolution`` (config ``face_embedding.resolution``) sets FaceNet's input size; a
    public classifier runs at the resolution it was trained at, and a different
    ``resolution`` is an error (retrain it)."""
    path = Path(path)
    _require_face_file(path)
    ckpt = io.torch_load(path)
    if isinstance(ckpt, Mapping) and ckpt.get("kind") == "public_classifier":
        if resolution is not None and int(resolution) != int(ckpt["resolution"]):
            raise ValueError(f"{path}: face-embedding network trained at {ckpt['resolution']} "
                             f"px, face_embedding.resolution is {resolution}; retrain it "
                             f"(rule train_face_embedding)")
        classifier = build_model(ckpt["architecture"], ckpt["n_classes"])
        classifier.load_state_dict(ckpt["state_dict"])
        return FaceEmbedding(classifier, ckpt["resolution"]).to(device).eval()
    return load_facenet(path, device, resolution)


def public_holdout_split(labels: Sequence[int], fraction: float = FACE_HOLDOUT_FRACTION,
                         seed: int = 0) -> tuple[list[int], list[int]]:
    """(train, held-out) indices: per identity, a seeded random ``round(fraction · n)`` of its
    images (at least one when it has two or more) are held out."""
    gen = torch.Generator().manual_seed(seed)
    by_label: dict[int, list[int]] = {}
    for i, y in enumerate(labels):
        by_label.setdefault(int(y), []).append(i)
    train, held = [], []
    for y in sorted(by_label):
        idx = by_label[y]
        k = max(1, round(fraction * len(idx))) if len(idx) >= 2 else 0
        perm = torch.randperm(len(idx), generator=gen).tolist()
        held += [idx[j] for j in perm[:k]]
        train += [idx[j] for j in perm[k:]]
    return sorted(train), sorted(held)


@torch.no_grad()
def _embed(net: nn.Module, loader: DataLoader, device: torch.device) -> tuple[Tensor, Tensor]:
    feats, labels = [], []
    for x, y in loader:
        feats.append(net(x.to(device)).float().cpu())
        labels.append(y)
    return torch.cat(feats), torch.cat(labels)


def train_face_embedding(dataset_dir: str | Path, *, out_model: str | Path,
                         out_metrics: str | Path, architecture: str = "resnet18",
                         resolution: int = 64, training: Mapping[str, Any] | None = None,
                         augmentation: Mapping[str, Any] | None = None, seed: int = 0,
                         holdout_fraction: float = FACE_HOLDOUT_FRACTION, num_workers: int = 0,
                         weights_path: str | Path | None = None,
                         device: str | torch.device = "cpu", progress: bool = True,
                         resume_path: str | Path | None = None,
                         stop_after_epochs: int | None = None) -> dict[str, Any] | None:
    """Train the demo face-embedding network: ``architecture`` on the public pool
    ``<dataset_dir>/public`` (identities must be disjoint from ``<dataset_dir>/private``), from
    scratch or, with ``weights_path``, from a pretrained backbone
    (:func:`atat.training.models.build_model`, as a target model's ``training.pretrained``),
    holding out ``holdout_fraction`` of each identity's images for validation (best-val-loss
    checkpoint), through the one training loop (:func:`atat.training.train.fit`; resumable from
    ``resume_path``; None when ``stop_after_epochs`` interrupted the run). Besides the
    held-out classification accuracy the metrics report the held-out 1-nearest-neighbour
    identification accuracy in embedding space (gallery = the training images), i.e. how
    well the embedding separates identities."""
    device = torch.device(device)
    root = Path(dataset_dir)
    public_root, private_root = root / "public", root / "private"
    p = _recipe(training)
    seed_everything(seed)
    loader_gen = torch.Generator().manual_seed(seed)
    public_names = set(read_meta(public_root)["class_names"])
    overlap: list[str] = []
    if (private_root / "meta.json").exists():
        overlap = sorted(public_names & set(read_meta(private_root)["class_names"]))
        if overlap:
            raise ValueError(f"public pool {public_root} shares identities with the private "
                             f"data: {overlap[:5]}")
    full_train = ManifestDataset(public_root, "public",
                                 build_transform(resolution, train=True, aug=augmentation))
    full_eval = ManifestDataset(public_root, "public", build_transform(resolution, train=False))
    train_idx, held_idx = public_holdout_split(full_train.targets, holdout_fraction, seed)
    if not held_idx:
        raise ValueError(f"{public_root}: too few images per identity to hold any out")
    n_classes = full_train.n_classes
    bs = p["batch_size"]
    train_loader = DataLoader(Subset(full_train, train_idx), batch_size=bs, shuffle=True,
                              drop_last=len(train_idx) >= bs, generator=loader_gen,
                              num_workers=num_workers)
    val_loader = DataLoader(Subset(full_eval, held_idx), batch_size=bs, num_workers=num_workers)
    model = build_model(architecture, n_classes, weights_path).to(device)
    _check_batches(train_loader, "face embedding", bs)
    settings = {"kind": "public_classifier", "dataset_dir": str(dataset_dir),
                "architecture": architecture, "resolution": int(resolution), "training": p,
                "augmentation": augmentation, "seed": int(seed),
                "holdout_fraction": float(holdout_fraction), "num_workers": int(num_workers)}
    if weights_path is not None:  # only then: a from-scratch run keeps its fingerprint
        settings["weights_path"] = str(weights_path)
    fit = train_loop(model, _CrossEntropy(), name="face embedding", n_classes=n_classes,
                     recipe=p, train_loader=train_loader, val_loader=val_loader,
                     loader_gen=loader_gen, resume_path=resume_path,
                     fingerprint=fingerprint(settings), device=device,
                     stop_after_epochs=stop_after_epochs, progress=progress)
    if fit is None:
        return None
    best = fit["best"]
    emb = FaceEmbedding(model, resolution).eval()
    gallery, g_labels = _embed(emb, DataLoader(Subset(full_eval, train_idx), batch_size=bs),
                               device)
    probe, p_labels = _embed(emb, val_loader, device)
    nearest = torch.cdist(probe, gallery).argmin(dim=1)
    nn_acc = float((g_labels[nearest] == p_labels).float().mean())
    checkpoint = {
        "format_version": FORMAT_VERSION, "kind": "public_classifier",
        "architecture": architecture, "n_classes": int(n_classes),
        "resolution": int(resolution), "state_dict": best["model"], "best_epoch": best["epoch"],
        "pretrained": weights_path is not None,
    }
    metrics = {
        "source": "public_classifier", "architecture": architecture,
        "pretrained": weights_path is not None,
        "n_identities": int(n_classes), "resolution": int(resolution), "seed": int(seed),
        "n_train": len(train_idx), "n_heldout": len(held_idx),
        "holdout_fraction": float(holdout_fraction), "identity_overlap_with_private": len(overlap),
        "best_epoch": best["epoch"], "heldout_loss": best["val_loss"],
        "heldout_acc": best["val_acc"], "heldout_nn_acc": nn_acc,
        "train_seconds": fit["train_seconds"], "training": p,
        "augmentation": copy.deepcopy(dict(augmentation)) if augmentation else None,
        "history": fit["history"], "device": str(device), "versions": versions(),
    }
    io.torch_save(checkpoint, out_model)
    io.write_json(out_metrics, metrics)
    log.info("face embedding: held-out acc %.4f, held-out 1-NN acc %.4f (best epoch %d)",
             metrics["heldout_acc"], nn_acc, best["epoch"])
    return metrics
