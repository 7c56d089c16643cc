"""The inversion job's resume state is discarded when the settings or input networks change."""

from atat.inversion.run import RESUME_STAMP, prepare_resume_dir, resume_fingerprint


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
