"""Tests of the embedded synthetic identity dataset (atat.data.synthfaces)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from PIL import Image

from atat.data import synthfaces as sf
from atat.data.manifest import read_dataset, split_indices

SMALL = dict(
    n_private_identities=3,
    n_public_identities=3,
    images_per_identity=5,
    public_images_per_identity=3,
    resolution=32,
    progress=False,
)


def _hashes(root):
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    base = tmp_path_factory.mktemp("synth")
    a = base / "a"
    info = sf.generate_synthfaces(a, seed=0, **SMALL)
    b = base / "b"
    sf.generate_synthfaces(b, seed=0, **SMALL)
    c = base / "c"
    sf.generate_synthfaces(c, seed=1, **SMALL)
    return base, info


def test_layout_and_manifest(gen):
    base, info = gen
    root = base / "a"
    assert sorted(p.name for p in base.iterdir()) == ["a", "b", "c"]  # no temp dirs left
    assert sorted(p.name for p in root.iterdir()) == ["private", "public"]
    priv, pm = read_dataset(root / "private")
    pub, qm = read_dataset(root / "public")
    assert info["private"] == pm and info["public"] == qm
    assert pm["n_classes"] == 3 and pm["class_names"] == ["priv_0000", "priv_0001", "priv_0002"]
    assert qm["class_names"] == ["pub_0000", "pub_0001", "pub_0002"]
    assert pm["resolution"] == [32, 32] and pm["split_seed"] == 42
    assert len(priv) == 15 and len(pub) == 9 and set(pub["split"]) == {"public"}
    # identity-major order, splits from split_indices over that order
    assert list(priv["path"][:2]) == ["images/priv_0000/0000.png", "images/priv_0000/0001.png"]
    assert list(priv["label"]) == [i // 5 for i in range(15)]
    for name, idx in split_indices(15, seed=42).items():
        assert set(priv["split"][idx]) == {name}
    with Image.open(root / "private" / priv["path"][0]) as im:
        assert im.size == (32, 32) and im.mode == "RGB"
    ids = json.loads((root / "private" / "identities.json").read_text())
    assert [i["name"] for i in ids] == pm["class_names"]


def test_same_seed_identical_bytes(gen):
    base, _ = gen
    ha, hb = _hashes(base / "a"), _hashes(base / "b")
    assert len(ha) == 2 * (1 + 1 + 1) + 15 + 9  # manifest, meta, identities per pool + images
    assert ha == hb


def test_different_seed_differs(gen):
    base, _ = gen
    ha, hc = _hashes(base / "a"), _hashes(base / "c")
    assert ha.keys() == hc.keys()
    imgs = [k for k in ha if k.endswith(".png")]
    assert all(ha[k] != hc[k] for k in imgs)


def test_public_private_disjoint(gen):
    base, _ = gen
    priv, pm = read_dataset(base / "a" / "private")
    pub, qm = read_dataset(base / "a" / "public")
    assert not set(pm["class_names"]) & set(qm["class_names"])
    hp = {hashlib.sha256((base / "a" / "private" / p).read_bytes()).hexdigest() for p in priv["path"]}
    hq = {hashlib.sha256((base / "a" / "public" / p).read_bytes()).hexdigest() for p in pub["path"]}
    assert len(hp) == len(priv) and len(hq) == len(pub) and not hp & hq
    strip = lambda i: {k: v for k, v in i.items() if k not in ("name", "pool", "index", "attempt")}  # noqa: E731
    ip = [strip(i) for i in json.loads((base / "a" / "private" / "identities.json").read_text())]
    iq = [strip(i) for i in json.loads((base / "a" / "public" / "identities.json").read_text())]
    assert all(x != y for x in ip for y in iq)


def test_identities_distinct_and_prefix_stable():
    ids = sf.make_identities(12, "private", seed=3)
    assert [i["name"] for i in ids[:2]] == ["priv_0000", "priv_0001"]
    sigs = [sf._discrete_signature(i) for i in ids]
    for i in range(len(sigs)):
        for j in range(i):
            assert sum(a != b for a, b in zip(sigs[i], sigs[j])) >= sf.MIN_DISCRETE_DIFF
    assert sf.make_identities(5, "private", seed=3) == ids[:5]
    assert sf.make_identities(5, "public", seed=3) != ids[:5]
    with pytest.raises(ValueError):
        sf.make_identities(2, "attacker", seed=3)


@pytest.mark.parametrize("res", [32, 64, 128])
def test_resolutions_and_determinism(res):
    ident = sf.make_identities(1, "public", seed=0)[0]
    a = sf.render_identity_image(ident, 0, resolution=res)
    b = sf.render_identity_image(ident, 0, resolution=res)
    c = sf.render_identity_image(ident, 1, resolution=res)
    assert a.size == (res, res) and a.mode == "RGB"
    arr = np.asarray(a)
    assert np.array_equal(arr, np.asarray(b))
    assert not np.array_equal(arr, np.asarray(c))  # nuisance varies per image
    assert arr.std() > 10  # not a blank image


def test_nuisance_zero_still_renders_face():
    ident = sf.make_identities(1, "private", seed=0)[0]
    a = np.asarray(sf.render_identity_image(ident, 0, resolution=32, nuisance=0.0), dtype=float)
    b = np.asarray(sf.render_identity_image(ident, 1, resolution=32, nuisance=0.0), dtype=float)
    # only background colour / clothing / expression vary: the face centre stays close
    centre = (slice(10, 22), slice(10, 22))
    assert np.abs(a[centre] - b[centre]).mean() < 0.5 * np.abs(a - b).mean()


def test_refuses_existing_and_overwrites(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "junk.txt").write_text("x")
    small = {**SMALL, "n_private_identities": 2, "n_public_identities": 1, "images_per_identity": 2,
             "public_images_per_identity": 1}
    with pytest.raises(FileExistsError):
        sf.generate_synthfaces(out, **small)
    sf.generate_synthfaces(out, overwrite=True, **small)
    assert sorted(p.name for p in out.iterdir()) == ["private", "public"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_interrupted_run_leaves_nothing(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = sf.render_identity_image

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] > 5:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(sf, "render_identity_image", flaky)
    with pytest.raises(KeyboardInterrupt):
        sf.generate_synthfaces(tmp_path / "out", **SMALL)
    assert list(tmp_path.iterdir()) == []


def test_cli(tmp_path, capsys):
    rc = sf.main(["--out", str(tmp_path / "cli"), "--n-private", "2", "--n-public", "2",
                  "--images-per-identity", "3", "--public-images-per-identity", "1",
                  "--resolution", "32", "--no-progress", "--sheet", str(tmp_path / "sheet.png")])
    assert rc == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["public"] == {"public": 2} and sum(out["private"].values()) == 6
    assert (tmp_path / "sheet.png").is_file()


# Hashes of the raw RGB bytes rendered by render_face, recorded before render_face was split
# into named drawing steps (issue 15 item 5): any change to what is drawn, or to the order of
# the per-image random draws, changes them. Cases: (pool, identities, images each, resolution,
# nuisance, rotation), identities of seed 3; together they draw every hair style, beard, face,
# eye, nose and brow shape, hats, glasses and earrings.
RENDER_GOLDEN = {
    ("private", 48, 2, 32, 1.0, True):
        "b1b622457c98e93abd212adbc02f23163b896187d7a1775a30bf1993ba2e703f",
    ("public", 16, 2, 64, 1.0, True):
        "036ac99fe6e86ce59c5c38d02105777d8a1c52483c74c917dfdd4f4fbd57a6f8",
    ("private", 8, 2, 48, 0.0, True):
        "262f2eb567da2c3ce2753aca20bc74cbea84af2985b44cdaf9330d7122748051",
    ("private", 8, 2, 40, 2.0, False):
        "9f318ac99ef06a30c8796af309a87f2bfbc7191b5efbdf69b726ee9f6166dbc5",
}


def test_render_face_draws_exactly_the_recorded_images():
    seen: dict[str, set] = {k: set() for k in ("hair_style", "beard", "face_shape", "eye_shape",
                                              "nose_shape", "brow_shape")}
    accessories = set()
    for (pool, n_id, n_img, res, nz, rot), expected in RENDER_GOLDEN.items():
        h = hashlib.sha256()
        for ident in sf.make_identities(n_id, pool, seed=3):
            for k, values in seen.items():
                values.add(ident[k])
            accessories |= {k for k in ("hat", "glasses", "earrings") if ident[k] is not None}
            for j in range(n_img):
                rng = sf._rng(3, 2, sf.POOLS[pool][1], ident["index"], j)
                img = sf.render_face(ident, rng, resolution=res, nuisance=nz, rotation=rot)
                assert img.size == (res, res) and img.mode == "RGB"
                h.update(img.tobytes())
        assert h.hexdigest() == expected, (pool, n_id, n_img, res, nz, rot)
    assert seen["hair_style"] == set(sf.HAIR_STYLES)
    assert seen["beard"] == {None, "full", "goatee", "stubble"}
    assert seen["face_shape"] == set(sf.FACE_SHAPES) and seen["nose_shape"] == set(sf.NOSE_SHAPES)
    assert seen["eye_shape"] == set(sf.EYE_SHAPES) and seen["brow_shape"] == set(sf.BROW_SHAPES)
    assert accessories == {"hat", "glasses", "earrings"}


def test_the_dogs_domain_writes_breeds_in_the_same_layout(tmp_path, gen):
    """domain="dogs" (Table 26's population): the same on-disk format and split, the pools'
    classes from atat.data.synthdogs, its meta saying so; faces' files unchanged by the key."""
    from atat.data import synthdogs

    base, _ = gen
    info = sf.generate_synthfaces(tmp_path / "d", seed=0, domain="dogs", **SMALL)
    priv, pm = read_dataset(tmp_path / "d" / "private")
    _, qm = read_dataset(tmp_path / "d" / "public")
    assert pm["class_names"] == ["priv_0000", "priv_0001", "priv_0002"] and len(priv) == 15
    assert qm["class_names"] == ["pub_0000", "pub_0001", "pub_0002"]
    assert pm["name"] == "synthfaces-dogs_private" and "domain dogs" in pm["source"]
    assert pm["generator"]["domain"] == "dogs" and info["private"] == pm
    assert "domain" not in read_dataset(base / "a" / "private")[1]["generator"]  # faces: as before
    breeds = json.loads((tmp_path / "d" / "private" / "identities.json").read_text())
    assert breeds == json.loads(json.dumps(synthdogs.make_breeds(3, "private", seed=0)))
    with Image.open(tmp_path / "d" / "private" / priv["path"][0]) as im:
        expected = synthdogs.render_breed_image(breeds[0], 0, seed=0, resolution=32,
                                                nuisance=sf.DEFAULTS["nuisance"])
        assert np.array_equal(np.asarray(im), np.asarray(expected))
    # the faces of the same seed are other images
    with Image.open(base / "a" / "private" / priv["path"][0]) as face:
        assert not np.array_equal(np.asarray(face), np.asarray(expected))
    with pytest.raises(ValueError, match="unknown synthetic domain 'cats'"):
        sf.generate_synthfaces(tmp_path / "e", domain="cats", **SMALL)
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("domain", ["faces", "dogs"])
def test_extra_test_images_grow_only_the_test_split(tmp_path, domain):
    """extra_test_images_per_identity: the paper's split of the first images and every image
    are those of the dataset without extras (so a model trained on either is the same); the
    extra images of each class are test-only; meta records the count only when it is > 0."""
    kw = dict(n_private_identities=3, n_public_identities=1, images_per_identity=10,
              public_images_per_identity=1, resolution=16, seed=3, domain=domain, progress=False)
    sf.generate_synthfaces(tmp_path / "base", **kw)
    sf.generate_synthfaces(tmp_path / "more", extra_test_images_per_identity=4, **kw)
    a, meta_a = read_dataset(tmp_path / "base" / "private")
    b, meta_b = read_dataset(tmp_path / "more" / "private")
    for split in ("train", "val"):
        pd_a = a[a["split"] == split].reset_index(drop=True)
        pd_b = b[b["split"] == split].reset_index(drop=True)
        assert pd_a.equals(pd_b), split
    test_b = b[b["split"] == "test"]
    assert set(a.loc[a["split"] == "test", "path"]) < set(test_b["path"])
    assert len(test_b) == (a["split"] == "test").sum() + 3 * 4
    extra = b[~b["path"].isin(a["path"])]
    assert (extra["split"] == "test").all() and len(extra) == 12
    assert extra.groupby("label").size().tolist() == [4, 4, 4]
    assert extra["path"].str.endswith(("0010.png", "0011.png", "0012.png", "0013.png")).all()
    for rel in a["path"]:  # the shared images are byte-identical
        assert ((tmp_path / "base" / "private" / rel).read_bytes()
                == (tmp_path / "more" / "private" / rel).read_bytes())
    assert meta_b["counts"]["test"] == meta_a["counts"]["test"] + 12
    assert meta_b["generator"]["extra_test_images_per_identity"] == 4
    assert "extra_test_images_per_identity" not in meta_a["generator"]
    pub_a, _ = read_dataset(tmp_path / "base" / "public")
    pub_b, _ = read_dataset(tmp_path / "more" / "public")
    assert pub_a.equals(pub_b)  # the public pool gets no extra images


def test_extra_test_images_must_not_be_negative(tmp_path):
    with pytest.raises(ValueError, match="extra_test_images_per_identity must be >= 0"):
        sf.generate_synthfaces(tmp_path / "x", extra_test_images_per_identity=-1, progress=False)
