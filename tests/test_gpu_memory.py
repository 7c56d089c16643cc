"""The GPU memory plan of every GPU rule (atat.plan.gpu_memory): the committed table is what the
measuring tool counts, the model gives the paper's jobs sizes that pick their cards, and the
cluster settings, cards, retries and sinfo checks of atat.plan.cluster behave as documented."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from atat.plan import cluster as cl
from atat.plan import gpu_memory as gm
from atat.plan.config import load_config

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "config" / "config.yaml"
DEMO = ROOT / "config" / "demo.yaml"
PER_IMAGE = ("no_grad", "train", "input_grad", "hidden")


@pytest.fixture(scope="module")
def paper():
    return load_config(PAPER)


# ---- the table is what the measuring tool counts ---------------------------------------------

@pytest.mark.parametrize("key", [("resnet10", 32), ("densenet47", 32)])
def test_regenerated_entries_match_the_table(key):
    """Counting again (a few seconds each at 32 px) gives the committed row."""
    pytest.importorskip("torch")
    from atat.lab.gpu_memory_table import measure_network

    got, want = measure_network(*key), gm.NETWORKS[key]
    assert (got.params, got.feature_dim) == (want.params, want.feature_dim)
    for field in PER_IMAGE:
        g, w = getattr(got, field), getattr(want, field)
        assert (g is None) == (w is None), field
        if w is not None:
            assert g == pytest.approx(w, rel=0.02), (key, field, g, w)


@pytest.mark.slow
@pytest.mark.parametrize("defense", ["atat", "trap_mid"])
def test_regenerated_defense_factors_match_the_table(defense):
    """AT-AT's two forward graphs and Trap-MID's discriminator, counted on the probe network."""
    from atat.lab.gpu_memory_table import measure_defense

    act, params = measure_defense(defense)
    assert (act, params) == pytest.approx(gm.DEFENSE_FACTORS[defense], abs=0.02)


@pytest.mark.slow
def test_regenerated_autoattack_state_is_within_the_table():
    from atat.lab.gpu_memory_table import measure_autoattack

    copies = measure_autoattack(("resnet10", 32))
    assert copies == pytest.approx(gm.AUTOATTACK_STATE_IMAGES, abs=1.0)


def test_live_tensor_counter_sees_allocations_and_frees():
    torch = pytest.importorskip("torch")
    from atat.lab.gpu_memory_table import peak_bytes

    def work():
        a = torch.zeros(1000)          # 4,000 bytes
        b = torch.zeros(2000)          # 8,000 more: peak 12,000
        del a, b
        c = torch.zeros(500)
        c.add_(1)                      # in place: no new tensor
        return None

    assert peak_bytes(work) == 12000


# ---- the model ---------------------------------------------------------------------------------

def test_unmeasured_resolution_is_scaled_and_unknown_network_named():
    base = gm.NETWORKS[("resnet18", 224)]
    half = gm.network("resnet18", 112)
    assert half.params == base.params and half.train == round(base.train / 4)
    with pytest.raises(ValueError, match=r"vgg16.*gpu_memory_table --only vgg16@224"):
        gm.network("vgg16", 224)


def test_gpu_mb_adds_allocator_and_context_like_the_inversion_estimate():
    from atat.plan.inversion_resources import gpu_memory_gib, gpu_memory_mb

    kw = dict(batch_size=25, render_batch_size=25, resolution=1024, architecture="resnet152",
              input_resolution=224)
    assert gm.gpu_mb((gpu_memory_gib("ppa", **kw) - 1.0) / 1.15 * 2 ** 30) == \
        gpu_memory_mb("ppa", **kw)
    assert gm.gpu_mb(0) == 2000   # 1 GiB of context -> 1.07 "GB" -> rounded up


def test_defense_factors_follow_the_graphs_a_step_keeps():
    at_at = gm.defense_factors("atat", {})
    assert at_at[0] > 1.8                               # clean + perturbed graph
    assert gm.defense_factors("atat", {"weight_clean": 0.0})[0] < 1.2
    assert gm.defense_factors("at", {})[0] < 1.2       # AT's default: no clean term
    assert gm.defense_factors("trap_mid", {})[1] > 1.9   # the discriminator
    assert gm.defense_factors("nodef", {}) == (1.0, 1.0)
    for act, params in gm.DEFENSE_FACTORS.values():
        assert act > 0 and params > 0


def test_paper_jobs(paper):
    cell = dict(dataset="facescrub", arch="resnet152", seed=0)
    nodef = gm.job_gpu_mem_mb("train_model", {**cell, "defense": "nodef"}, paper)
    atat = gm.job_gpu_mem_mb("train_model", {**cell, "defense": "atat"}, paper)
    r18 = gm.job_gpu_mem_mb("train_model", {**cell, "arch": "resnet18", "defense": "nodef"},
                            paper)
    assert r18 < nodef < atat and atat > 1.7 * nodef - 4000
    # batch 128 of ResNet-152 at 224 px: 176 MB of activations per image (counted)
    assert 24000 <= nodef <= 32000
    aa = gm.job_gpu_mem_mb("autoattack", {**cell, "defense": "nodef", "eps": "0.0005"}, paper)
    hsic = gm.job_gpu_mem_mb("measure_hsic", {**cell, "defense": "nodef"}, paper)
    assert hsic < nodef and aa > 20000
    ppa = gm.job_gpu_mem_mb("invert_shard", {**cell, "defense": "nodef", "attack": "ppa",
                                              "start": 0, "stop": 10}, paper)
    assert ppa == 55000                                   # atat.plan.inversion_resources
    assert gm.job_gpu_mem_mb("train_evaluation_model", {"dataset": "facescrub"}, paper) < 20000
    assert gm.job_gpu_mem_mb("real_embeddings", {"dataset": "facescrub"}, paper) < 8000
    assert gm.job_gpu_mem_mb("train_generator", {"generator": "x"}, paper) is None


def test_merging_invert_job_needs_no_gpu(paper):
    from atat.plan.job_cost import class_shards

    wc = dict(dataset="facescrub", arch="resnet152", defense="nodef", seed=0, attack="ppa")
    assert len(class_shards(paper, "facescrub", "resnet152", "nodef", "ppa")) > 1
    assert gm.job_gpu_mem_mb("invert", wc, paper) == 0


def test_describe_names_the_keys_that_lower_memory(paper):
    wc = dict(dataset="facescrub", arch="resnet152", defense="atat", seed=0)
    shape, remedy = gm.describe_job("train_model", wc, paper)
    assert "resnet152 at 224 px, batch 128, defense atat" == shape
    assert "training.batch_size" in remedy
    shape, remedy = gm.describe_job("invert_shard", {**wc, "attack": "ppa"}, paper)
    assert "batch 25" in shape and "inversion.ppa.batch_size" in remedy
    assert "inversion.ppa.candidates.batch_size" in remedy
    assert "autoattack.batch_size" in gm.describe_job("autoattack", wc, paper)[1]


# ---- cluster settings, cards, retries ------------------------------------------------------------

def test_cluster_settings_file_merged_key_by_key(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("max_runtime_min: 2880\ngpu_cards: {a100_80g: 80000, a100_40g: 40000}\n")
    s = cl.load_cluster_settings({"cluster_settings": str(f), "max_runtime_min": 1440}, ROOT)
    assert s["max_runtime_min"] == 1440                    # --config replaces one key ...
    assert [c.name for c in s["gpu_cards"]] == ["a100_40g", "a100_80g"]   # ... keeps the cards
    assert s["gpu_card_resource"] == "gpu_model"
    assert cl.load_cluster_settings({"cluster_settings": "none"}, ROOT)["gpu_cards"] == []
    # the default file is the profile's own
    default = cl.load_cluster_settings({}, ROOT)
    assert isinstance(default["max_runtime_min"], int) and default["gpu_cards"]
    f.write_text("max_runtime: 10\n")
    with pytest.raises(ValueError, match="unknown key.*max_runtime"):
        cl.load_cluster_settings({"cluster_settings": str(f)}, ROOT)
    with pytest.raises(ValueError, match="does not exist"):
        cl.load_cluster_settings({"cluster_settings": str(tmp_path / "no.yaml")}, ROOT)
    with pytest.raises(ValueError, match="gpu_card_resource"):
        cl.load_cluster_settings({"cluster_settings": "none", "gpu_card_resource": "gres"}, ROOT)


def test_partitions_are_one_setting_and_a_job_without_a_gpu_gets_the_cpu_one(tmp_path):
    """cluster settings `partitions` (atat.plan.cluster): the one home of the partition names;
    a job that requests a GPU asks for `gpu`, every other job for `cpu`; absent: none."""
    default = cl.load_cluster_settings({}, ROOT)
    assert default["partitions"] == {"gpu": "gpu", "cpu": "cpu"}   # the profile's file
    assert cl.job_partition(default["partitions"], True) == "gpu"
    assert cl.job_partition(default["partitions"], False) == "cpu"
    assert cl.load_cluster_settings({"cluster_settings": "none"}, ROOT)["partitions"] is None
    assert cl.job_partition(None, True) is None
    mine = cl.load_cluster_settings({"partitions": {"gpu": "a100q", "cpu": "short"}}, ROOT)
    assert mine["partitions"] == {"gpu": "a100q", "cpu": "short"}
    assert [c.name for c in mine["gpu_cards"]] == [c.name for c in default["gpu_cards"]]
    for bad in ({"gpu": "a"}, {"gpu": "a", "cpu": "b", "big": "c"}, "gpu", {"gpu": "a b", "cpu": "c"}):
        with pytest.raises(ValueError, match="partitions"):
            cl.load_cluster_settings({"cluster_settings": "none", "partitions": bad}, ROOT)


def test_cards_parse_with_compute_capability_and_unsupported_ones_are_named():
    cards = cl.parse_cards("v100=32000@7.0, a100=80000@8.0,l40s=48000")
    assert [(c.name, c.mb, c.capability) for c in cards] == [
        ("v100", 32000, (7, 0)), ("l40s", 48000, None), ("a100", 80000, (8, 0))]
    bad = cl.unsupported_cards(cards, ["sm_75", "sm_80", "sm_86", "sm_90"])
    assert len(bad) == 1 and bad[0].startswith("v100 (compute capability 7.0, sm_70)")
    with pytest.raises(ValueError, match="name=MB"):
        cl.parse_cards("a100")
    with pytest.raises(ValueError, match="twice"):
        cl.parse_cards("a=1,a=2")


def test_retry_runtime_grows_and_is_capped():
    assert cl.retry_runtime_min(100, 1, 2880) == 100
    assert cl.retry_runtime_min(100, 2, 2880) == 150
    assert cl.retry_runtime_min(100, 3, 2880) == 230          # 225 rounded up to 10
    assert cl.retry_runtime_min(2000, 2, 2880) == 2880        # capped at the limit
    assert cl.retry_runtime_min(100, 3, None) == 230


def test_jobs_fitting_no_card_are_one_grouped_message():
    cards = cl.parse_cards("a100_40g=40000")
    jobs = [("invert_shard", f"fs/r152/nodef/0/ppa/{i}", 55000, "ppa shape", "lower ppa")
            for i in range(3)] + [("train_model", "fs/r152/atat/0", 52000, "r152 shape",
                                   "lower training"),
                                  ("train_model", "fs/r18/nodef/0", 5000, "r18", "x")]
    with pytest.raises(cl.GpuCardError) as exc:
        cl.check_gpu_cards(jobs, cards)
    msg = str(exc.value)
    assert msg.startswith("4 GPU job(s) need more memory than the largest card of gpu_cards, "
                          "a100_40g (40000 MB)")
    assert "invert_shard: 3 job(s), ppa shape: 55000 MB (e.g. fs/r152/nodef/0/ppa/0)" in msg
    assert "train_model: 1 job(s), r152 shape: 52000 MB" in msg and "r18" not in msg
    assert "invert_shard: lower ppa; train_model: lower training" in msg
    cl.check_gpu_cards(jobs, cl.parse_cards("a100_80g=80000"))   # all fit: no error


SINFO = """cpu*|(null)|(null)
gpu|gpu:a100_40g:4(S:0-1),gpu:l40s:2|a100,l40s
gpu|gpu:a100_80g:8|a100_80g
"""


def test_sinfo_names_against_the_requests():
    info = cl.parse_sinfo(SINFO)
    assert info["cpu"] == {"gres": set(), "features": set()}
    assert {"gpu", "a100_40g", "l40s", "a100_80g"} <= info["gpu"]["gres"]
    cards = cl.parse_cards("a100_40g=40000,l40s=48000,a100_80g=80000")
    ok = [("train_model", "gpu", "a100_40g", None, None), ("summary", "cpu", None, None, None)]
    assert cl.cluster_name_problems(ok, info, cards) == []
    bad = ok + [("invert_shard", "gpus", "a100_80g", None, None),
                ("autoattack", "gpu", "h100", None, None),
                ("measure_hsic", "gpu", None, "v100", None)]
    problems = cl.cluster_name_problems(bad, info, cl.parse_cards("a100_40g=1,h200=2"))
    text = "\n".join(problems)
    assert "partition 'gpus' does not exist (sinfo lists: cpu, gpu) -- requested by invert_shard" in text
    assert "GPU model 'h100' is not a GRES type of partition 'gpu'" in text
    assert "constraint 'v100' is not a node feature of partition 'gpu'" in text
    assert "gpu_cards lists 'h200'" in text and "'a100_40g'" not in text.split("gpu_cards lists")[1]


def test_device_message_names_missing_kernels_not_memory():
    from atat.base.device import cuda_problem

    cuda = SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,
                           get_arch_list=lambda: ["sm_75", "sm_80", "sm_90"],
                           get_device_capability=lambda i=0: (7, 0),
                           get_device_name=lambda i=0: "Tesla V100-SXM2-32GB")
    fake = SimpleNamespace(__version__="2.14.1+cu130", version=SimpleNamespace(cuda="13.0"),
                           cuda=cuda)
    msg = cuda_problem(fake)
    assert "Tesla V100-SXM2-32GB (compute capability 7.0, sm_70) has no kernels" in msg
    assert "Not a memory problem" in msg and "gpu_cards" in msg


def test_network_memory_is_frozen_and_scalable():
    e = gm.NETWORKS[("resnet152", 224)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.params = 1   # type: ignore[misc]
    assert e.scaled(2.0).input_grad == 2 * e.input_grad


def test_the_demos_pretraining_jobs_have_a_memory_model():
    """pretrain_backbone (the embedded default's pretraining) is priced as a training job of
    its backbone on the population's identities, and named with the keys that lower it."""
    from atat.plan.config import load_config, pretraining_backbones

    root = Path(__file__).resolve().parents[1]
    demo = load_config(root / "config" / "config.yaml", root / "config" / "demo.yaml")
    sizes = {}
    for arch, res in pretraining_backbones(demo):
        wc = {"backbone": arch, "res": str(res)}
        sizes[arch] = gm.job_gpu_mem_mb("pretrain_backbone", wc, demo)
        assert sizes[arch] is not None and 1000 <= sizes[arch] <= 8000, (arch, sizes[arch])
        shape, remedy = gm.describe_job("pretrain_backbone", wc, demo)
        assert arch in shape and "pretraining.training.batch_size" in remedy
    assert set(sizes) >= {"resnet18", "resnet10"}
