"""AutoAttack's examples: a seeded random sample of the split (autoattack.seed), not its first
images -- a manifest lists a split identity by identity, so the first n would be the first
identities' only (the authors' code draws its validation split by a random permutation)."""

from __future__ import annotations

import torch

from atat.data.manifest import read_dataset
from atat.robustness import first_examples


def test_seeded_examples_span_the_identities_and_repeat_for_the_seed(make_synthfaces, tmp_path):
    root = make_synthfaces(tmp_path / "ds", images_per_identity=12, extra_test_images_per_identity=6)
    labels = read_dataset(root, "test")[0]["label"].tolist()
    n = len(labels) // 3
    assert labels == sorted(labels)                      # identity by identity
    x0, y0 = first_examples(root, "test", n, 16)
    assert y0.tolist() == labels[:n] and len(set(y0.tolist())) < len(set(labels))
    x1, y1 = first_examples(root, "test", n, 16, seed=0)
    x2, y2 = first_examples(root, "test", n, 16, seed=0)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)   # the seed fixes the sample
    assert len(y1) == n and len(set(y1.tolist())) == len(set(labels))   # every identity
    assert y1.tolist() == sorted(y1.tolist())            # kept in manifest order
    assert not torch.equal(first_examples(root, "test", n, 16, seed=1)[0], x1)
    assert 0.0 <= float(x1.min()) and float(x1.max()) <= 1.0   # un-normalised [0, 1]
    # asking for more than the split has: all of it
    assert len(first_examples(root, "test", 10 * len(labels), 16, seed=0)[1]) == len(labels)
