"""Evaluation model (docs/sources.md#evaluation-model) and face-embedding networks
(docs/sources.md#facenet-distance)."""

import pytest
import torch
import torchvision

from atat.data.loading import make_loader
from atat.data.synthfaces import generate_synthfaces
from atat.inversion.evaluation import (build_evaluation_model, eval_augmentation,
                                       load_evaluation_model, load_face_network, load_facenet,
                                       public_holdout_split, train_evaluation_model,
                                       train_face_embedding)
from atat.training.train import evaluate


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "ds"
    generate_synthfaces(out, n_private_identities=3, n_public_identities=4,
                        images_per_identity=10, public_images_per_identity=5, resolution=16,
                        seed=5, progress=False)
    return out


def test_eval_model_with_aux_head_features_are_2048d():
    torch.manual_seed(0)
    model = build_evaluation_model(5, aux_logits=True, resolution=299)
    assert model.aux_logits and not model.transform_input
    x = torch.rand(2, 3, 299, 299) * 2 - 1
    model.train()
    logits, aux = model.forward_train(x)
    assert logits.shape == (2, 5) and aux.shape == (2, 1000)  # aux keeps the 1000-way fc
    model.eval()
    with torch.no_grad():
        feats = model.features(x)
        assert feats.shape == (2, 2048)
        assert torch.allclose(model(x), model.head(feats))


def test_eval_model_without_aux_head_at_small_resolution():
    torch.manual_seed(0)
    model = build_evaluation_model(3, aux_logits=False, resolution=80).eval()
    assert model.net.AuxLogits is None and not model.aux_logits
    with torch.no_grad():
        x = torch.rand(2, 3, 80, 80) * 2 - 1
        assert model.features(x).shape == (2, 2048) and model(x).shape == (2, 3)
    model.train()
    assert model.forward_train(torch.rand(2, 3, 80, 80))[1] is None


def test_pretrained_weights_file_sets_transform_input(tmp_path):
    torch.manual_seed(1)
    ref = torchvision.models.Inception3(num_classes=1000, aux_logits=True, init_weights=True)
    torch.save(ref.state_dict(), tmp_path / "inception.pth")
    model = build_evaluation_model(4, aux_logits=False, weights_path=tmp_path / "inception.pth")
    assert model.transform_input
    assert torch.equal(model.net.Conv2d_1a_3x3.conv.weight, ref.Conv2d_1a_3x3.conv.weight)
    assert model.head.out_features == 4
    with pytest.raises(FileNotFoundError):
        build_evaluation_model(4, weights_path=tmp_path / "missing.pth")


def test_eval_augmentation_translates_the_config_keys():
    aug = eval_augmentation({"rrc_scale": [0.85, 1.0], "flip": 0.5,
                             "color_jitter": {"brightness": 0.2, "contrast": 0.2,
                                              "saturation": 0.1, "hue": 0.1}})
    assert aug == {"random_resized_crop": True, "rrc_scale": [0.85, 1.0],
                   "horizontal_flip": True, "color_jitter": True,
                   "jitter": {"brightness": 0.2, "contrast": 0.2, "saturation": 0.1, "hue": 0.1}}
    assert eval_augmentation({"flip": 0})["horizontal_flip"] is False
    with pytest.raises(ValueError):
        eval_augmentation({"flip": 0.3})


def test_training_one_epoch_writes_a_checkpoint_that_reproduces_its_metrics(data_dir, tmp_path):
    root = data_dir / "private"
    m = train_evaluation_model(root, out_model=tmp_path / "eval.pt",
                               out_metrics=tmp_path / "eval.json", n_classes=3, resolution=75,
                               aux_logits=False, seed=0, progress=False,
                               training={"epochs": 1, "batch_size": 8, "lr_milestones": [],
                                         "eval_every": 1},
                               augmentation={"rrc_scale": [0.85, 1.0], "flip": 0.5})
    assert m["best_epoch"] == 0 and len(m["history"]) == 1
    for key in ("train_acc", "val_acc", "test_acc"):
        assert 0.0 <= m[key] <= 1.0
    model = load_evaluation_model(tmp_path / "eval.pt")
    assert not model.training and model.resolution == 75 and model.n_classes == 3

    class CE:
        @staticmethod
        def eval_loss(net, x, y):
            logits = net(x)
            return torch.nn.functional.cross_entropy(logits, y, reduction="sum"), logits

    test = evaluate(model, CE(), make_loader(root, "test", resolution=75, batch_size=8,
                                             train=False), torch.device("cpu"))
    assert test["loss"] == pytest.approx(m["test_loss"], rel=1e-5)
    assert test["acc"] == m["test_acc"]
    with pytest.raises(ValueError, match="classes"):
        train_evaluation_model(root, out_model=tmp_path / "x.pt", out_metrics=tmp_path / "x.json",
                               n_classes=4, resolution=75, aux_logits=False, progress=False,
                               training={"epochs": 1, "batch_size": 8, "lr_milestones": []})


def test_facenet_loader_reads_a_state_dict_and_gives_unit_norm_embeddings(tmp_path):
    from facenet_pytorch import InceptionResnetV1

    torch.manual_seed(0)
    ref = InceptionResnetV1(pretrained=None, classify=False).eval()
    state = dict(ref.state_dict())
    state["logits.weight"] = torch.zeros(8631, 512)  # as in 20180402-114759-vggface2.pt
    state["logits.bias"] = torch.zeros(8631)
    torch.save(state, tmp_path / "vggface2.pt")
    net = load_face_network(tmp_path / "vggface2.pt")
    assert not net.training
    x = torch.rand(3, 3, 160, 160) * 2 - 1
    with torch.no_grad():
        emb = net(x)
        assert emb.shape == (3, 512)
        assert torch.allclose(emb.norm(dim=1), torch.ones(3), atol=1e-5)
        assert torch.allclose(emb, ref(x), atol=1e-6)
    with pytest.raises(FileNotFoundError):
        load_facenet(tmp_path / "missing.pt")
    assert net.resolution == 160  # docs/sources.md#facenet-distance default
    # face_embedding.resolution is used for the FaceNet source (it was hard-coded to 160)
    assert load_face_network(tmp_path / "vggface2.pt", resolution=128).resolution == 128


def test_missing_face_network_file_names_the_path(tmp_path):
    missing = tmp_path / "weights" / "20180402-114759-vggface2.pt"
    with pytest.raises(FileNotFoundError, match="face-embedding network not found: .*"
                       "20180402-114759-vggface2.pt.*facenet_weights"):
        load_face_network(missing)


def test_public_holdout_split_is_per_identity_and_disjoint():
    labels = [0] * 10 + [1] * 20 + [2] * 1
    train, held = public_holdout_split(labels, 0.1, seed=0)
    assert not set(train) & set(held) and sorted(train + held) == list(range(31))
    assert [labels[i] for i in held].count(0) == 1 and [labels[i] for i in held].count(1) == 2
    assert 30 in train  # a single image is never held out
    assert public_holdout_split(labels, 0.1, seed=0) == (train, held)


def test_face_embedding_trains_on_the_public_pool(data_dir, tmp_path):
    m = train_face_embedding(data_dir, out_model=tmp_path / "face.pt",
                             out_metrics=tmp_path / "face.json", resolution=16, seed=0,
                             progress=False, holdout_fraction=0.2,
                             training={"epochs": 1, "batch_size": 8, "lr_milestones": [],
                                       "eval_every": 1})
    assert m["n_identities"] == 4 and m["n_heldout"] == 4 and m["n_train"] == 16
    assert m["identity_overlap_with_private"] == 0
    assert 0 <= m["heldout_acc"] <= 1 and 0 <= m["heldout_nn_acc"] <= 1
    net = load_face_network(tmp_path / "face.pt")
    assert net.resolution == 16 and not net.training
    assert load_face_network(tmp_path / "face.pt", resolution=16).resolution == 16
    with pytest.raises(ValueError, match="trained at 16 px, face_embedding.resolution is 32"):
        load_face_network(tmp_path / "face.pt", resolution=32)
    with torch.no_grad():
        emb = net(torch.rand(2, 3, 16, 16) * 2 - 1)
    assert emb.shape == (2, 512)
    assert torch.allclose(emb.norm(dim=1), torch.ones(2), atol=1e-5)


def _weights(path):
    return torch.load(path, weights_only=True)["state_dict"]


def test_evaluation_model_trains_through_atat_train_and_resumes_to_identical_weights(
        data_dir, tmp_path, monkeypatch):
    import atat.training.train as T

    epochs = []
    real = T._train_epoch

    def spy(run, epoch):  # the one training loop runs the epochs
        epochs.append((run.name, epoch))
        return real(run, epoch)

    monkeypatch.setattr(T, "_train_epoch", spy)
    kw = dict(n_classes=3, resolution=75, aux_logits=False, seed=0, progress=False,
              training={"epochs": 3, "batch_size": 8, "lr_milestones": [1], "eval_every": 1},
              augmentation={"rrc_scale": [0.85, 1.0], "flip": 0.5})
    root = data_dir / "private"
    full = train_evaluation_model(root, out_model=tmp_path / "full.pt",
                                  out_metrics=tmp_path / "full.json", **kw)
    assert epochs == [("evaluation model", e) for e in range(3)]
    resume = tmp_path / "resume" / "eval.resume.pt"
    assert train_evaluation_model(root, out_model=tmp_path / "part.pt",
                                  out_metrics=tmp_path / "part.json", resume_path=resume,
                                  stop_after_epochs=1, **kw) is None
    assert resume.exists() and not (tmp_path / "part.pt").exists()
    epochs.clear()
    resumed = train_evaluation_model(root, out_model=tmp_path / "part.pt",
                                     out_metrics=tmp_path / "part.json", resume_path=resume, **kw)
    assert epochs == [("evaluation model", 1), ("evaluation model", 2)]  # epoch 0 not redone
    a, b = _weights(tmp_path / "full.pt"), _weights(tmp_path / "part.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["history"] == full["history"] and resumed["test_acc"] == full["test_acc"]
    assert not resume.exists()
    # a resume file of another configuration is not used
    assert train_evaluation_model(root, out_model=tmp_path / "x.pt", out_metrics=tmp_path / "x.json",
                                  resume_path=resume, stop_after_epochs=1, **kw) is None
    other = {**kw, "seed": 1}
    epochs.clear()
    train_evaluation_model(root, out_model=tmp_path / "y.pt", out_metrics=tmp_path / "y.json",
                           resume_path=resume, **other)
    assert [e for _, e in epochs] == [0, 1, 2]


def test_face_embedding_resumes_to_identical_weights(data_dir, tmp_path):
    kw = dict(resolution=16, seed=0, progress=False, holdout_fraction=0.2,
              training={"epochs": 3, "batch_size": 8, "lr_milestones": [2], "eval_every": 1},
              augmentation={"random_resized_crop": True, "rrc_scale": [0.85, 1.0],
                            "horizontal_flip": True, "color_jitter": False})
    full = train_face_embedding(data_dir, out_model=tmp_path / "full.pt",
                                out_metrics=tmp_path / "full.json", **kw)
    resume = tmp_path / "face.resume.pt"
    assert train_face_embedding(data_dir, out_model=tmp_path / "part.pt",
                                out_metrics=tmp_path / "part.json", resume_path=resume,
                                stop_after_epochs=2, **kw) is None
    resumed = train_face_embedding(data_dir, out_model=tmp_path / "part.pt",
                                   out_metrics=tmp_path / "part.json", resume_path=resume, **kw)
    a, b = _weights(tmp_path / "full.pt"), _weights(tmp_path / "part.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["history"] == full["history"]
    assert resumed["heldout_nn_acc"] == full["heldout_nn_acc"] and not resume.exists()


def test_a_target_architecture_as_judge_loads_its_pretrained_backbone_and_round_trips(
        data_dir, tmp_path):
    """evaluation_model.architecture densenet47 (the miniature's judge): the pretraining's file
    initialises every tensor but the head, features are the classifier's penultimate ones, and
    the trained checkpoint rebuilds the same network (architecture read from it)."""
    from atat.training.models import torchvision_network

    torch.manual_seed(3)
    backbone = torchvision_network("densenet47", num_classes=7)
    torch.save(backbone.state_dict(), tmp_path / "densenet47.pth")
    model = build_evaluation_model(3, architecture="densenet47", aux_logits=False,
                                   weights_path=tmp_path / "densenet47.pth", resolution=32)
    assert not model.aux_logits and not model.transform_input
    assert torch.equal(model.classifier.features.conv0.weight, backbone.features.conv0.weight)
    with torch.no_grad():
        x = torch.rand(2, 3, 32, 32) * 2 - 1
        model.eval()
        assert model.features(x).shape == (2, model.classifier.feature_dim)
        assert torch.allclose(model(x), model.head(model.features(x)))  # as metrics.py reads it
    model.train()
    assert model.forward_train(torch.rand(2, 3, 32, 32))[1] is None
    with pytest.raises(ValueError, match="aux_logits"):
        build_evaluation_model(3, architecture="densenet47", aux_logits=True)

    m = train_evaluation_model(data_dir / "private", out_model=tmp_path / "ev.pt",
                               out_metrics=tmp_path / "ev.json", n_classes=3, resolution=32,
                               architecture="densenet47", aux_logits=False,
                               weights_path=tmp_path / "densenet47.pth",
                               training={"epochs": 1, "batch_size": 4, "lr_milestones": []},
                               seed=0, progress=False)
    assert m["architecture"] == "densenet47" and m["pretrained"]
    loaded = load_evaluation_model(tmp_path / "ev.pt")
    assert loaded.architecture == "densenet47" and loaded.resolution == 32

    class CE:
        @staticmethod
        def eval_loss(net, x, y):
            logits = net(x)
            return torch.nn.functional.cross_entropy(logits, y, reduction="sum"), logits

    loader = make_loader(data_dir / "private", "test", batch_size=4, train=False,
                         resolution=32)
    assert evaluate(loaded, CE(), loader, torch.device("cpu"))["acc"] == m["test_acc"]
