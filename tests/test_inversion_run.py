"""The inversion job's resume state is discarded when the settings or input networks change."""

from atat.base.io import RESUME_STAMP, prepare_resume_dir
from atat.inversion.run import resume_fingerprint


def test_resume_state_is_kept_only_for_the_same_settings_and_inputs(tmp_path):
    model = tmp_path / "model.pt"
    model.write_bytes(b"weights v1")
    params = {"steps": 30, "candidates": {"num_candidates": 10}}
    rdir = tmp_path / "resume"
    fp = resume_fingerprint(params, [model, None, tmp_path / "absent.pt"])
    assert not prepare_resume_dir(rdir, fp)          # fresh: nothing to resume
    assert (rdir / RESUME_STAMP).exists()
    (rdir / "batch00000.pt").write_bytes(b"progress")
    # same settings, same networks (keys in another order): the progress is kept
    same = resume_fingerprint({"candidates": {"num_candidates": 10}, "steps": 30}, [model])
    assert prepare_resume_dir(rdir, same)
    assert (rdir / "batch00000.pt").read_bytes() == b"progress"
    # other settings: the batches are stale
    assert not prepare_resume_dir(rdir, resume_fingerprint({**params, "steps": 10}, [model]))
    assert sorted(p.name for p in rdir.iterdir()) == [RESUME_STAMP]
    # a retrained target model (same path, other bytes): stale too
    (rdir / "batch00000.pt").write_bytes(b"progress")
    model.write_bytes(b"weights v2")
    assert not prepare_resume_dir(rdir, resume_fingerprint({**params, "steps": 10}, [model]))
    assert not (rdir / "batch00000.pt").exists()
    # a directory from before the stamp existed (no inputs.json) is not trusted
    (rdir / RESUME_STAMP).unlink()
    (rdir / "class_00000.pt").write_bytes(b"old")
    assert not prepare_resume_dir(rdir, resume_fingerprint(params, [model]))
    assert not (rdir / "class_00000.pt").exists()


def test_real_embeddings_file_is_checked_against_the_job_networks(tmp_path):
    """rule real_embeddings' file is stamped with the networks' hashes; a job with other
    networks refuses it instead of scoring against stale features."""
    import pytest
    import torch

    from atat.base import io
    from atat.data.synthfaces import generate_synthfaces
    from atat.inversion.evaluation import build_evaluation_model
    from atat.inversion.run import _checked_embeddings, write_real_embeddings

    generate_synthfaces(tmp_path / "ds", n_private_identities=3, n_public_identities=1,
                        images_per_identity=4, public_images_per_identity=1, resolution=16,
                        seed=1, progress=False)
    torch.manual_seed(0)
    model = build_evaluation_model(3, aux_logits=False, resolution=75)
    ckpt = {"kind": "evaluation_model", "n_classes": 3, "aux_logits": False,
            "transform_input": model.transform_input, "resolution": 75,
            "state_dict": model.state_dict()}
    ev_path = tmp_path / "eval.pt"
    io.torch_save(ckpt, ev_path)
    out = tmp_path / "emb.pt"
    info = write_real_embeddings(evaluation_path=ev_path, dataset_dir=tmp_path / "ds",
                                 face_path=None, faces=False, out_path=out)
    assert info["n_classes"] == 3 and info["face_sha256"] is None
    cache = _checked_embeddings(out, ev_path, None)
    assert sorted(cache["eval"]) == [0, 1, 2] and cache["face"] is None
    state = {k: v + 1 if v.is_floating_point() else v for k, v in model.state_dict().items()}
    io.torch_save(dict(ckpt, state_dict=state), ev_path)   # a retrained evaluation model
    with pytest.raises(ValueError, match="other networks"):
        _checked_embeddings(out, ev_path, None)
