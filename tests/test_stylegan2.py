"""Tests for atat.inversion.stylegan2 (docs/sources.md#stylegan2-generator, #if-gmi,
#stylegan2-pickles)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.signal import convolve2d, correlate2d

from atat.inversion.safe_pickle import load_stylegan_pickle, save_stylegan_pickle
from atat.inversion.stylegan2 import (
    OFFICIAL_PRIOR_KWARGS,
    FullyConnectedLayer,
    Generator,
    SynthesisLayer,
    ToRGBLayer,
    count_parameters,
    modulated_conv2d,
    setup_filter,
    upsample2d,
)

# the official FFHQ/AFHQ-Dog generator architecture: the package's one definition, checked here
# against the parameter counts and names of docs/sources.md#stylegan2-generator, #stylegan2-pickles
FFHQ_KW = OFFICIAL_PRIOR_KWARGS


def _tiny(seed=1234, res=16, conv_clamp=None, noise=0.25) -> Generator:
    torch.manual_seed(seed)
    G = Generator(z_dim=8, c_dim=0, w_dim=8, img_resolution=res, img_channels=3,
                  mapping_kwargs=dict(num_layers=2),
                  synthesis_kwargs=dict(channel_base=64, channel_max=8, conv_clamp=conv_clamp))
    with torch.no_grad():
        for n, p in G.named_parameters():
            if n.endswith("noise_strength"):
                p.fill_(noise)
        G.mapping.w_avg.copy_(torch.linspace(-1, 1, 8))
    return G.eval()


# ---------------------------------------------------------------------------------------
# Architecture / names (docs/sources.md#stylegan2-generator counts,
# docs/sources.md#stylegan2-pickles names)
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("res,n_params,n_tensors,num_ws", [(1024, 30_370_060, 182, 18),
                                                           (512, 30_276_583, 163, 16)])
def test_official_architecture_counts_and_names(res, n_params, n_tensors, num_ws):
    with torch.device("meta"):
        G = Generator(img_resolution=res, **FFHQ_KW)
    sd = G.state_dict()
    assert count_parameters(G) == n_params
    assert count_parameters(G.mapping) == 2_101_248
    assert len(sd) == n_tensors
    assert G.num_ws == num_ws and G.synthesis.num_blocks == int(math.log2(res)) - 1
    shapes = {k: tuple(v.shape) for k, v in sd.items()}
    assert shapes["mapping.fc0.weight"] == (512, 512) and shapes["mapping.w_avg"] == (512,)
    assert shapes["synthesis.b4.const"] == (512, 4, 4)
    assert shapes["synthesis.b4.resample_filter"] == (4, 4)
    assert shapes["synthesis.b4.conv1.noise_strength"] == ()
    assert shapes["synthesis.b4.conv1.noise_const"] == (4, 4)
    assert shapes["synthesis.b4.torgb.weight"] == (3, 512, 1, 1)
    assert "synthesis.b4.conv0.weight" not in shapes
    assert shapes[f"synthesis.b{res}.conv0.noise_const"] == (res, res)
    if res == 1024:
        assert shapes["synthesis.b1024.conv0.weight"] == (32, 64, 3, 3)
        assert shapes["synthesis.b1024.conv0.affine.weight"] == (64, 512)
        assert shapes["synthesis.b1024.conv1.weight"] == (32, 32, 3, 3)
        assert shapes["synthesis.b1024.torgb.weight"] == (3, 32, 1, 1)
        assert G.synthesis.feature_shape(6) == (256, 128, 128)
        assert G.synthesis.feature_shape(7) == (128, 256, 256)
    assert G.synthesis.feature_shape(1) == (512, 4, 4)
    assert G.synthesis.feature_shape(5) == (512, 64, 64)


def test_resample_filter_buffers_equal_normalised_outer_product():
    G = _tiny()
    f = torch.tensor([1.0, 3, 3, 1])
    expect = torch.outer(f, f) / 64
    for k, v in G.state_dict().items():
        if k.endswith("resample_filter"):
            torch.testing.assert_close(v, expect)


def test_ws_split_shares_torgb_w_with_next_conv0():
    G = _tiny(res=32)
    ws = torch.arange(G.num_ws, dtype=torch.float32)[None, :, None].repeat(1, 1, 8)
    idx = [s[0, :, 0].long().tolist() for s in G.synthesis.split_ws(ws)]
    assert idx == [[0, 1], [1, 2, 3], [3, 4, 5], [5, 6, 7]]  # b4, b8, b16, b32


# ---------------------------------------------------------------------------------------
# Ops against independent numpy/scipy references written from docs/sources.md#stylegan2-generator
# ---------------------------------------------------------------------------------------

def _np_upsample2d(x: np.ndarray) -> np.ndarray:
    """Zero insertion (pixels at even coords), pad 2 before / 1 after, depthwise f·4."""
    f = np.outer([1, 3, 3, 1], [1, 3, 3, 1]) / 64.0 * 4
    H, W = x.shape
    z = np.zeros((2 * H, 2 * W))
    z[::2, ::2] = x
    z = np.pad(z, ((2, 1), (2, 1)))
    return convolve2d(z, f, mode="valid")


def _np_modconv(x, weight, styles, up, demod=True):
    """Per-sample: W' = W·s_i, demod d_o, then conv (up=1, pad 1) or transposed conv
    (stride 2, unflipped kernel: out[2i+j] += x[i]·w[j]) → pad 1 → FIR f·4."""
    N, I, H, W = x.shape
    O, _, kh, kw = weight.shape
    f = np.outer([1, 3, 3, 1], [1, 3, 3, 1]) / 64.0 * 4
    outs = []
    for n in range(N):
        w = weight * styles[n][None, :, None, None]
        if demod:
            w = w / np.sqrt((w ** 2).sum(axis=(1, 2, 3), keepdims=True) + 1e-8)
        if up == 1:
            y = np.zeros((O, H, W))
            for o in range(O):
                for i in range(I):
                    y[o] += correlate2d(x[n, i], w[o, i], mode="same") if kh > 1 else x[n, i] * w[o, i, 0, 0]
        else:
            t = np.zeros((O, 2 * H + 1, 2 * W + 1))
            for o in range(O):
                for i in range(I):
                    for a in range(H):
                        for b in range(W):
                            t[o, 2 * a:2 * a + 3, 2 * b:2 * b + 3] += x[n, i, a, b] * w[o, i]
            y = np.stack([convolve2d(np.pad(t[o], 1), f, mode="valid") for o in range(O)])
        outs.append(y)
    return np.stack(outs)


def test_upsample2d_matches_reference_and_preserves_constants():
    x = torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    y = upsample2d(x, setup_filter([1, 3, 3, 1]))
    assert y.shape == (2, 3, 10, 10)
    ref = np.stack([np.stack([_np_upsample2d(x[n, c].double().numpy()) for c in range(3)])
                    for n in range(2)])
    np.testing.assert_allclose(y.numpy(), ref, atol=1e-5)
    ones = upsample2d(torch.ones(1, 1, 6, 6), setup_filter([1, 3, 3, 1]))
    torch.testing.assert_close(ones[..., 2:-2, 2:-2], torch.ones(1, 1, 8, 8))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("up", [1, 2])
def test_modulated_conv_matches_per_sample_reference(up, fused):
    g = torch.Generator().manual_seed(up)
    x = torch.randn(2, 3, 4, 4, generator=g)
    weight = torch.randn(5, 3, 3, 3, generator=g)
    styles = torch.rand(2, 3, generator=g) + 0.5
    y = modulated_conv2d(x, weight, styles, up=up, padding=1,
                         resample_filter=setup_filter([1, 3, 3, 1]), fused=fused)
    assert y.shape == (2, 5, 4 * up, 4 * up)
    ref = _np_modconv(x.double().numpy(), weight.double().numpy(), styles.double().numpy(), up)
    np.testing.assert_allclose(y.numpy(), ref, atol=1e-4, rtol=1e-4)
    # 1×1 without demodulation (toRGB)
    w1 = torch.randn(2, 3, 1, 1, generator=g)
    y1 = modulated_conv2d(x, w1, styles, demodulate=False, fused=fused)
    ref1 = _np_modconv(x.double().numpy(), w1.double().numpy(), styles.double().numpy(), 1,
                       demod=False)
    np.testing.assert_allclose(y1.numpy(), ref1, atol=1e-4, rtol=1e-4)


def test_training_mode_nonfused_path_matches_eval_fused_path():
    G = _tiny(res=16, conv_clamp=256)
    z = torch.randn(3, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        a = G(z, noise_mode="const")
        G.train()
        b = G.synthesis(G.mapping(z, None, skip_w_avg_update=True), noise_mode="const")
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_synthesis_layer_hand_computed_known_answer():
    layer = SynthesisLayer(1, 1, w_dim=2, resolution=4, use_noise=True)
    with torch.no_grad():
        layer.weight.fill_(1.0)
        layer.affine.weight.zero_()      # style = affine bias = 1
        layer.noise_strength.fill_(0.0)
    y = layer(torch.ones(1, 1, 4, 4), torch.zeros(1, 2), noise_mode="const")
    # ones ⋆ ones(3x3), pad 1 → 4/6/9 counts; demod 1/3; lrelu·√2
    counts = torch.tensor([[4.0, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]])
    torch.testing.assert_close(y[0, 0], counts / 3 * math.sqrt(2), atol=1e-5, rtol=1e-5)
    # bias, noise (before bias), clamp
    with torch.no_grad():
        layer.bias.fill_(-10.0)
        layer.noise_strength.fill_(2.0)
        layer.noise_const.fill_(1.0)
    y = layer(torch.ones(1, 1, 4, 4), torch.zeros(1, 2), noise_mode="const")
    pre = counts / 3 + 2.0 - 10.0
    torch.testing.assert_close(y[0, 0], torch.nn.functional.leaky_relu(pre, 0.2) * math.sqrt(2))
    layer.conv_clamp = 0.5
    y = layer(torch.ones(1, 1, 4, 4), torch.zeros(1, 2), noise_mode="const")
    assert y.abs().max() <= 0.5 + 1e-6


def test_torgb_no_demodulation_and_fc_gains():
    rgb = ToRGBLayer(4, 3, w_dim=2)
    with torch.no_grad():
        rgb.affine.weight.zero_()
        rgb.weight.fill_(1.0)
        rgb.bias.copy_(torch.tensor([0.0, 1.0, -1.0]))
    x = torch.full((1, 4, 2, 2), 2.0)
    y = rgb(x, torch.zeros(1, 2))
    # s = 1/√4 per channel; Σ_i 2·1·0.5 = 4; + bias
    torch.testing.assert_close(y[0, :, 0, 0], torch.tensor([4.0, 5.0, 3.0]))
    fc = FullyConnectedLayer(4, 1, activation="lrelu", lr_multiplier=0.01)
    with torch.no_grad():
        fc.weight.fill_(100.0)   # effective weight 100·0.01/√4 = 0.5
        fc.bias.fill_(100.0)     # effective bias 100·0.01 = 1
    out = fc(torch.tensor([[1.0, 1.0, 1.0, 1.0]]))  # 0.5·4 + 1 = 3 → 3·√2
    torch.testing.assert_close(out, torch.tensor([[3.0 * math.sqrt(2)]]))
    out = fc(torch.tensor([[-4.0, 0.0, 0.0, 0.0]]))  # -2 + 1 = -1 → -0.2·√2
    torch.testing.assert_close(out, torch.tensor([[-0.2 * math.sqrt(2)]]))


# ---------------------------------------------------------------------------------------
# Generator behaviour
# ---------------------------------------------------------------------------------------

def test_known_answer_tiny_generator():
    """Regression value (computed once with this implementation, seeded init)."""
    G = _tiny()
    z = torch.randn(2, 8, generator=torch.Generator().manual_seed(99))
    with torch.no_grad():
        img = G(z, truncation_psi=0.7, truncation_cutoff=2, noise_mode="const")
    assert img.shape == (2, 3, 16, 16) and img.dtype == torch.float32
    assert img.sum().item() == pytest.approx(24.976099014282227, rel=1e-4, abs=1e-3)
    assert img.abs().sum().item() == pytest.approx(963.277587890625, rel=1e-4)
    assert img.square().sum().item() == pytest.approx(1038.49169921875, rel=1e-4)
    got = [img[0, 0, 0, 0], img[1, 2, 15, 15], img[0, 1, 7, 9], img[1, 0, 3, 12]]
    want = [-1.3401895761489868, -0.3439038395881653, 0.9274402856826782, 0.7185652852058411]
    for g_, w_ in zip(got, want):
        assert g_.item() == pytest.approx(w_, abs=1e-4)


def test_mapping_truncation_psi0_gives_w_avg_and_psi1_identity():
    G = _tiny()
    z = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    ws1 = G.mapping(z, None, truncation_psi=1.0)
    assert ws1.shape == (4, G.num_ws, 8)
    assert torch.equal(ws1, ws1[:, :1].expand_as(ws1))  # broadcast to all layers
    ws0 = G.mapping(z, None, truncation_psi=0.0)
    torch.testing.assert_close(ws0, G.mapping.w_avg.expand_as(ws0))
    cut = G.mapping(z, None, truncation_psi=0.0, truncation_cutoff=2)
    torch.testing.assert_close(cut[:, :2], G.mapping.w_avg.expand(4, 2, 8))
    torch.testing.assert_close(cut[:, 2:], ws1[:, 2:])
    half = G.mapping(z, None, truncation_psi=0.5, truncation_cutoff=2)
    torch.testing.assert_close(half[:, :2], G.mapping.w_avg + 0.5 * (ws1[:, :2] - G.mapping.w_avg))
    # 2nd-moment normalisation of z: scaling z does not change w
    torch.testing.assert_close(G.mapping(3.0 * z, None), ws1, atol=1e-5, rtol=1e-5)
    # float64 z (as in the attacks' numpy candidates) is cast to float32
    assert G.mapping(z.double(), None).dtype == torch.float32


def test_w_avg_updates_only_in_training_mode():
    G = _tiny()
    z = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    before = G.mapping.w_avg.clone()
    G.mapping(z, None)
    assert torch.equal(G.mapping.w_avg, before)
    G.train()
    G.mapping(z, None, skip_w_avg_update=True)
    assert torch.equal(G.mapping.w_avg, before)
    w = G.mapping(z, None)[:, 0]
    torch.testing.assert_close(G.mapping.w_avg, w.detach().mean(0).lerp(before, 0.995))


@pytest.mark.parametrize("res", [16, 32])
def test_forward_from_reproduces_full_synthesis(res):
    G = _tiny(res=res, conv_clamp=256)
    z = torch.randn(3, 8, generator=torch.Generator().manual_seed(5))
    ws = G.mapping(z, None, truncation_psi=0.5, truncation_cutoff=8)
    full = G.synthesis(ws, noise_mode="const")
    assert full.shape == (3, 3, res, res)
    feats = G.synthesis.all_block_features(ws, noise_mode="const")
    torch.testing.assert_close(feats[-1][1], full, rtol=0, atol=0)
    for k in range(1, G.synthesis.num_blocks):
        x, img = G.synthesis.block_features(ws, k - 1)
        assert tuple(x.shape[1:]) == G.synthesis.feature_shape(k)
        torch.testing.assert_close(x, feats[k - 1][0], rtol=0, atol=0)
        out = G.synthesis.forward_from(k, x, ws, img=img)
        torch.testing.assert_close(out, full, rtol=1e-6, atol=1e-6)
        # IF-GMI semantics: img=None at the start block drops earlier toRGB contributions
        dropped = G.synthesis.forward_from(k, x, ws, img=None)
        assert dropped.shape == full.shape and not torch.allclose(dropped, full)
        up = img
        for _ in range(k, G.synthesis.num_blocks):
            up = upsample2d(up, setup_filter([1, 3, 3, 1]))
        torch.testing.assert_close(dropped, full - up, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        G.synthesis.forward_from(1, None, ws)


def test_gradients_reach_ws_and_intermediate_features():
    G = _tiny(res=16).requires_grad_(False)
    ws = G.mapping(torch.randn(2, 8), None)[:, :1].clone().requires_grad_(True)  # single_w
    x, _ = G.synthesis.block_features(G.synthesis.broadcast_ws(ws), 1)
    mid = x.detach().clone().requires_grad_(True)
    img = G.synthesis.forward_from(2, mid, G.synthesis.broadcast_ws(ws))
    img.square().mean().backward()
    assert ws.grad is not None and ws.grad.abs().sum() > 0
    assert mid.grad is not None and mid.grad.shape == mid.shape and mid.grad.abs().sum() > 0


def test_noise_modes():
    G = _tiny(res=16)
    ws = G.mapping(torch.randn(2, 8, generator=torch.Generator().manual_seed(3)), None)
    a = G.synthesis(ws, noise_mode="const")
    torch.testing.assert_close(a, G.synthesis(ws, noise_mode="const"), rtol=0, atol=0)
    torch.manual_seed(0)
    r1 = G.synthesis(ws, noise_mode="random")
    r2 = G.synthesis(ws, noise_mode="random")
    assert not torch.allclose(r1, r2)
    none = G.synthesis(ws, noise_mode="none")
    G0 = _tiny(res=16, noise=0.0)
    torch.testing.assert_close(none, G0.synthesis(ws, noise_mode="const"))
    with pytest.raises(ValueError):
        G.synthesis(ws, noise_mode="bogus")


def test_conditional_mapping_and_orig_architecture():
    torch.manual_seed(0)
    G = Generator(z_dim=8, c_dim=3, w_dim=8, img_resolution=8, img_channels=1,
                  mapping_kwargs=dict(num_layers=2),
                  synthesis_kwargs=dict(channel_base=32, channel_max=8, architecture="orig"))
    assert "mapping.embed.weight" in G.state_dict()
    assert "synthesis.b4.torgb.weight" not in G.state_dict()
    assert G.num_ws == 4  # 1 + 2 convs, + 1 torgb of the last block
    img = G(torch.randn(2, 8), torch.eye(3)[:2], noise_mode="none")
    assert img.shape == (2, 1, 8, 8)


def test_from_pickle_strict_roundtrip_with_official_kwargs_at_16px(tmp_path):
    torch.manual_seed(0)
    G = Generator(img_resolution=16, **FFHQ_KW).eval()
    path = tmp_path / "sg16.pkl"
    save_stylegan_pickle(path, G, module_src="raise SystemExit('must not run')")
    loaded = load_stylegan_pickle(path)
    assert loaded["init_kwargs"]["synthesis_kwargs"]["conv_clamp"] == 256
    assert len(loaded["state_dict"]) == len(G.state_dict())
    G2 = Generator.from_pickle(path)  # strict load
    z = torch.randn(1, 512, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a = G(z, truncation_psi=0.5, truncation_cutoff=8, noise_mode="const")
        b = G2(z, truncation_psi=0.5, truncation_cutoff=8, noise_mode="const")
    assert b.shape == (1, 3, 16, 16)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------
# Discriminator (docs/sources.md#stylegan2-discriminator) and the small-prior trainer
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("res,n_params,n_tensors", [(1024, 29_012_513, 82), (512, 28_982_849, 73)])
def test_discriminator_official_counts(res, n_params, n_tensors):
    from atat.inversion.stylegan2 import Discriminator

    with torch.device("meta"):
        D = Discriminator(c_dim=0, img_resolution=res, img_channels=3)
    sd = D.state_dict()
    assert count_parameters(D) == n_params and len(sd) == n_tensors
    assert tuple(sd[f"b{res}.fromrgb.weight"].shape) == (min(32768 // res, 512), 3, 1, 1)
    assert tuple(sd["b4.conv.weight"].shape) == (512, 513, 3, 3)
    assert tuple(sd["b4.fc.weight"].shape) == (512, 8192)
    assert tuple(sd["b4.out.weight"].shape) == (1, 512)


def test_minibatch_std_groups_are_strided_samples():
    from atat.inversion.stylegan2 import MinibatchStdLayer

    x = torch.zeros(4, 2, 1, 1)
    x[:, 0, 0, 0] = torch.tensor([0.0, 10.0, 2.0, 10.0])  # groups (0,2) and (1,3) with G=2
    y = MinibatchStdLayer(group_size=2)(x)
    assert y.shape == (4, 3, 1, 1)
    # group {0,2}: std of channel 0 = 1, channel 1 = 0 → mean over C = 0.5 (+eps effects)
    torch.testing.assert_close(y[[0, 2], 2].flatten(), torch.full((2,), 0.5), atol=1e-3, rtol=0)
    torch.testing.assert_close(y[[1, 3], 2].flatten(), torch.full((2,), 0.0), atol=1e-3, rtol=0)
    with pytest.raises(ValueError):
        MinibatchStdLayer(group_size=4)(torch.zeros(6, 2, 1, 1))


def test_discriminator_skip_layer_is_not_clamped():
    """NVIDIA's DiscriminatorBlock clamps fromrgb/conv0/conv1 but not the resnet skip layer."""
    from atat.inversion.stylegan2 import DiscriminatorBlock

    first = DiscriminatorBlock(0, 2, 2, resolution=8, img_channels=1, conv_clamp=1e-3)
    assert first.skip.conv_clamp is None
    assert first.fromrgb.conv_clamp == first.conv0.conv_clamp == first.conv1.conv_clamp == 1e-3
    block = DiscriminatorBlock(2, 2, 2, resolution=8, img_channels=1, conv_clamp=1e-3)
    with torch.no_grad():
        block.skip.weight.fill_(1.0)
        out, _ = block(torch.full((1, 2, 8, 8), 10.0), None)
    # skip at interior pixels: FIR gain 1, 1×1 conv summing 2 channels of 10 with weight gain
    # 1/√2, layer gain √0.5 → 10; the clamped residual conv1 adds at most 1e-3·√0.5.
    torch.testing.assert_close(out[..., 1:3, 1:3], torch.full((1, 2, 2, 2), 10.0),
                               atol=1e-3, rtol=0)


def test_discriminator_downsampling_layers():
    from atat.inversion.stylegan2 import Conv2dLayer

    skip = Conv2dLayer(1, 1, 1, bias=False, down=2)
    with torch.no_grad():
        skip.weight.fill_(1.0)
    ones = torch.ones(1, 1, 8, 8)
    y = skip(ones)
    assert y.shape == (1, 1, 4, 4)
    torch.testing.assert_close(y[..., 1:3, 1:3], torch.ones(1, 1, 2, 2))  # interior: FIR gain 1
    assert y[0, 0, 0, 0] < 1 and y[0, 0, 3, 3] < 1  # zero padding at both borders
    conv = Conv2dLayer(2, 3, 3, activation="lrelu", down=2)
    assert conv(torch.randn(2, 2, 8, 8)).shape == (2, 3, 4, 4)


def test_train_small_generator_runs_and_writes_loadable_pickle(tmp_path):
    from atat.data.synthfaces import generate_synthfaces
    from atat.inversion.stylegan2 import Discriminator, train_small_generator

    generate_synthfaces(tmp_path / "faces", n_private_identities=1, n_public_identities=2,
                        images_per_identity=2, public_images_per_identity=4, resolution=16,
                        progress=False)
    out = tmp_path / "prior.pkl"
    res = train_small_generator(tmp_path / "faces" / "public", resolution=16, steps=3,
                                batch_size=4, z_dim=8, w_dim=8, channel_base=64, channel_max=8,
                                r1_interval=2, seed=0, out_path=out, log_every=0)
    h = res["history"]
    assert len(h["loss_G"]) == 3 and all(math.isfinite(v) for v in h["loss_G"] + h["loss_D"])
    assert math.isfinite(h["r1"][0]) and math.isnan(h["r1"][1]) and math.isfinite(h["r1"][2])
    G_ema = res["G_ema"]
    assert isinstance(G_ema, Generator) and G_ema.img_resolution == 16
    # the prior was trained: G moved away from its seeded init, G_ema tracks G
    torch.manual_seed(0)
    G0 = Generator(**G_ema.init_kwargs)
    assert not torch.equal(G0.synthesis.b16.conv1.weight, res["G"].synthesis.b16.conv1.weight)
    G2 = Generator.from_pickle(out)
    z = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(G2(z, noise_mode="const"), G_ema(z, noise_mode="const"))
    D2 = Discriminator.from_pickle(out)
    assert D2(torch.zeros(4, 3, 16, 16)).shape == (4, 1)
    # tensor input path
    imgs = torch.rand(8, 3, 16, 16) * 2 - 1
    res2 = train_small_generator(None, resolution=16, steps=2, batch_size=4, z_dim=8, w_dim=8,
                                 channel_base=64, channel_max=8, images=imgs, seed=1)
    assert len(res2["history"]["loss_D"]) == 2


@pytest.mark.parametrize("channels,size,pad,down", [(3, 16, 1, 1), (8, 9, 2, 1), (16, 32, 1, 2),
                                                    (5, 8, 2, 2), (32, 4, 1, 2)])
def test_direct_fir_path_is_bit_identical_to_pad_then_convolve(monkeypatch, channels, size, pad,
                                                               down):
    """upfirdn2d's direct path (padding and stride inside the depthwise convolution) gives the
    same bits as the general path (F.pad, stride-1 convolution, slicing), forward and backward."""
    import atat.inversion.stylegan2 as sg

    f = sg.setup_filter([1, 3, 3, 1])
    g = torch.Generator().manual_seed(size * channels + pad)
    x = torch.randn(2, channels, size, size, generator=g)
    grad = None
    outs = []
    for direct in (True, False):
        monkeypatch.setattr(sg, "DIRECT_FIR", direct)
        xi = x.clone().requires_grad_(True)
        y = sg.upfirdn2d(xi, f, down=down, padding=(pad, pad, pad, pad), gain=1.5)
        if grad is None:
            grad = torch.randn(y.shape, generator=g)
        y.backward(grad)
        outs.append((y.detach(), xi.grad))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_direct_fir_path_trains_the_prior_bit_identically(monkeypatch):
    """Six steps of the prior's training (G, D, lazy R1, EMA) end in the same bits on both
    FIR paths: the direct path is a speed-up, not a change of the results."""
    import atat.inversion.stylegan2 as sg

    images = torch.rand(16, 3, 16, 16, generator=torch.Generator().manual_seed(1)) * 2 - 1
    states = []
    for direct in (True, False):
        monkeypatch.setattr(sg, "DIRECT_FIR", direct)
        res = sg.train_small_generator(None, resolution=16, steps=6, batch_size=4, z_dim=8,
                                       w_dim=8, channel_base=64, channel_max=16, r1_interval=2,
                                       seed=3, images=images, log_every=0)
        states.append({f"{k}.{n}": t.detach().clone() for k in ("G", "D", "G_ema")
                       for n, t in res[k].state_dict().items()})
    assert states[0].keys() == states[1].keys()
    differ = [n for n in states[0] if not torch.equal(states[0][n], states[1][n])]
    assert not differ, f"parameters differ between the FIR paths: {differ[:5]}"
