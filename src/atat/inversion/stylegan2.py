"""StyleGAN2(-ADA) generator, written from the formulas of docs/sources.md#stylegan2-generator.

No NVIDIA code is imported or copied.  Parameter/buffer names and shapes follow the
state-dict names of the official ``G_ema`` networks (docs/sources.md#stylegan2-pickles), so a state
dict read by
:func:`atat.inversion.safe_pickle.load_stylegan_pickle` loads with ``strict=True``.

Always runs in float32 (the attacks use ``force_fp32=True``); ``num_fp16_res`` and
``channels_last`` kwargs are accepted and ignored.  ``conv_clamp`` is honoured.

Intermediate-feature access for IF-GMI (docs/sources.md#if-gmi):
:meth:`SynthesisNetwork.forward_range`,
:meth:`SynthesisNetwork.forward_from`, :meth:`SynthesisNetwork.block_features`.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "setup_filter",
    "upfirdn2d",
    "upsample2d",
    "modulated_conv2d",
    "FullyConnectedLayer",
    "MappingNetwork",
    "SynthesisLayer",
    "ToRGBLayer",
    "SynthesisBlock",
    "SynthesisNetwork",
    "Generator",
    "OFFICIAL_PRIOR_KWARGS",
    "Conv2dLayer",
    "Discriminator",
    "train_small_generator",
    "count_parameters",
]

_SQRT2 = math.sqrt(2.0)

#: The official priors' generator architecture (NVIDIA's stylegan2-ada-pytorch train.py: cfg
#: 'stylegan2' for FFHQ at 1024 px, 'paper512' for AFHQ-Dog at 512 px share it): 8 mapping
#: layers, channel_base 32768, channel_max 512, 4 fp16 blocks, conv_clamp 256; everything else
#: at the classes' defaults.  Pass ``img_resolution`` beside it.
OFFICIAL_PRIOR_KWARGS = dict(z_dim=512, c_dim=0, w_dim=512, img_channels=3,
                             mapping_kwargs=dict(num_layers=8),
                             synthesis_kwargs=dict(channel_base=32768, channel_max=512,
                                                   num_fp16_res=4, conv_clamp=256))


# ---------------------------------------------------------------------------------------
# Low-level ops
# ---------------------------------------------------------------------------------------

def setup_filter(f: Sequence[float] | torch.Tensor = (1, 3, 3, 1)) -> torch.Tensor:
    """1-D taps → normalised 2-D FIR filter (outer product / sum); e.g. [1,3,3,1] → /64."""
    f = torch.as_tensor(f, dtype=torch.float32)
    if f.ndim == 0:
        f = f[None]
    if f.ndim == 1:
        f = torch.outer(f, f)
    return f / f.sum()


def _bias_act(x: torch.Tensor, b: torch.Tensor | None, act: str, gain: float = 1.0,
              clamp: float | None = None, dim: int = 1) -> torch.Tensor:
    if b is not None:
        shape = [1] * x.ndim
        shape[dim] = -1
        x = x + b.reshape(shape)
    if act == "lrelu":
        x = F.leaky_relu(x, 0.2) * (_SQRT2 * gain)
    elif act == "linear":
        if gain != 1:
            x = x * gain
    elif act == "relu":
        x = F.relu(x) * (_SQRT2 * gain)
    else:
        raise ValueError(f"unsupported activation {act!r}")
    if clamp is not None and clamp >= 0:
        x = x.clamp(-clamp, clamp)
    return x


#: upfirdn2d's direct path: where the padding is symmetric and non-negative (every FIR of the
#: synthesis and discriminator convolutions), pass it and the downsampling stride to the
#: depthwise convolution instead of ``F.pad`` + a stride-1 convolution + slicing. The same
#: products and sums in the same order: bit-identical (tests/test_stylegan2.py checks forward,
#: gradients and training steps against the general path) and faster (``make bench``,
#: component ``prior_fir``). False = the general path everywhere (the bench's reference).
DIRECT_FIR = True


def upfirdn2d(x: torch.Tensor, f: torch.Tensor, up: int = 1, down: int = 1,
              padding: Sequence[int] = (0, 0, 0, 0), gain: float = 1.0) -> torch.Tensor:
    """Upsample (zero insertion) → pad (x0, x1, y0, y1; negative = crop) → depthwise FIR
    (true convolution with the 2-D filter ``f`` times ``gain``) → downsample (keep every
    ``down``-th pixel starting at 0)."""
    N, C, H, W = x.shape
    x0, x1, y0, y1 = padding
    if DIRECT_FIR and up == 1 and x0 == x1 >= 0 and y0 == y1 >= 0:
        f = (f * gain).to(x.dtype).flip([0, 1])
        w = f[None, None].repeat(C, 1, 1, 1)
        return F.conv2d(x, w, padding=(y0, x0), stride=down, groups=C)
    if up > 1:
        x = x.reshape(N, C, H, 1, W, 1)
        x = F.pad(x, [0, up - 1, 0, 0, 0, up - 1])
        x = x.reshape(N, C, H * up, W * up)
    x = F.pad(x, [x0, x1, y0, y1])
    f = (f * gain).to(x.dtype).flip([0, 1])
    w = f[None, None].repeat(C, 1, 1, 1)
    x = F.conv2d(x, w, groups=C)
    if down > 1:
        x = x[:, :, ::down, ::down]
    return x


def upsample2d(x: torch.Tensor, f: torch.Tensor, up: int = 2) -> torch.Tensor:
    """2× FIR upsampling of the RGB skip path: zero-insert, pad 2 before / 1 after, f·up²."""
    fw = f.shape[-1]
    p0 = (fw + up - 1) // 2
    p1 = (fw - up) // 2
    return upfirdn2d(x, f, up=up, padding=(p0, p1, p0, p1), gain=up ** 2)


def modulated_conv2d(x: torch.Tensor, weight: torch.Tensor, styles: torch.Tensor,
                     noise: torch.Tensor | None = None, up: int = 1, padding: int = 0,
                     resample_filter: torch.Tensor | None = None,
                     demodulate: bool = True, fused: bool = True) -> torch.Tensor:
    """Per-sample modulated (and optionally demodulated) convolution, as one grouped conv.

    ``weight`` [O, I, kh, kw], ``styles`` [N, I].  up=1: cross-correlation with ``padding``.
    up=2: transposed conv (stride 2, unflipped weight as [I, O, kh, kw]) followed by the
    FIR filter ``resample_filter``·4 with the padding that yields exactly 2H×2W.
    Noise (already scaled) is added after the convolution.
    ``fused=False``: scale activations, ordinary conv with the shared weight, scale the
    output by the demodulation coefficients (numerically equivalent; faster for training).
    """
    N, I, H, W = x.shape
    O, _, kh, kw = weight.shape
    if up not in (1, 2):
        raise ValueError(f"unsupported up={up}")
    if up == 2 and resample_filter is None:
        raise ValueError("up=2 needs a resample filter")
    if not fused:
        x = x * styles.reshape(N, I, 1, 1)
        x = _conv_up(x, weight, up, padding, resample_filter, groups=1)
        if demodulate:
            d = (styles.square() @ weight.square().sum(dim=[2, 3]).t() + 1e-8).rsqrt()  # [N,O]
            x = x * d.reshape(N, O, 1, 1)
        if noise is not None:
            x = x + noise
        return x
    w = weight.unsqueeze(0) * styles.reshape(N, 1, I, 1, 1)  # [N,O,I,kh,kw]
    if demodulate:
        d = (w.square().sum(dim=[2, 3, 4]) + 1e-8).rsqrt()  # [N,O]
        w = w * d.reshape(N, O, 1, 1, 1)
    x = x.reshape(1, N * I, H, W)
    x = _conv_up(x, w.reshape(N * O, I, kh, kw), up, padding, resample_filter, groups=N)
    x = x.reshape(N, O, x.shape[2], x.shape[3])
    if noise is not None:
        x = x + noise
    return x


def _conv_up(x: torch.Tensor, w: torch.Tensor, up: int, padding: int,
             resample_filter: torch.Tensor | None, groups: int) -> torch.Tensor:
    """w: [groups·O, I, kh, kw].  up=1: cross-correlation with padding.  up=2: transposed
    conv (stride 2, unflipped) → FIR·4 with padding giving exactly 2H×2W."""
    if up == 1:
        return F.conv2d(x, w, padding=padding, groups=groups)
    GO, I, kh, kw = w.shape
    O = GO // groups
    fw = resample_filter.shape[-1]
    px0 = padding + (fw + up - 1) // 2 - (kw - 1)
    px1 = padding + (fw - up) // 2 - (kw - up)
    py0 = padding + (fw + up - 1) // 2 - (kh - 1)
    py1 = padding + (fw - up) // 2 - (kh - up)
    wt = w.reshape(groups, O, I, kh, kw).transpose(1, 2).reshape(groups * I, O, kh, kw)
    x = F.conv_transpose2d(x, wt, stride=up, groups=groups)
    return upfirdn2d(x, resample_filter, padding=(px0, px1, py0, py1), gain=up ** 2)


# ---------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------

class FullyConnectedLayer(nn.Module):
    """Equalised-lr FC: y = x·(W·lr/√in)ᵀ + b·lr, then activation (lrelu → ·√2)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 activation: str = "linear", lr_multiplier: float = 1.0, bias_init: float = 0.0):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.activation = activation
        self.weight = nn.Parameter(torch.randn([out_features, in_features]) / lr_multiplier)
        self.bias = nn.Parameter(torch.full([out_features], float(bias_init))) if bias else None
        self.weight_gain = lr_multiplier / math.sqrt(in_features)
        self.bias_gain = lr_multiplier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight.to(x.dtype) * self.weight_gain
        b = self.bias
        if b is not None:
            b = b.to(x.dtype)
            if self.bias_gain != 1:
                b = b * self.bias_gain
        if self.activation == "linear" and b is not None:
            return torch.addmm(b.unsqueeze(0), x, w.t())
        return _bias_act(x.matmul(w.t()), b, act=self.activation)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, act={self.activation}"


def _normalize_2nd_moment(x: torch.Tensor, dim: int = 1, eps: float = 1e-8) -> torch.Tensor:
    return x * (x.square().mean(dim=dim, keepdim=True) + eps).rsqrt()


class MappingNetwork(nn.Module):
    def __init__(self, z_dim: int, c_dim: int, w_dim: int, num_ws: int | None,
                 num_layers: int = 8, embed_features: int | None = None,
                 layer_features: int | None = None, activation: str = "lrelu",
                 lr_multiplier: float = 0.01, w_avg_beta: float | None = 0.995):
        super().__init__()
        self.z_dim, self.c_dim, self.w_dim = z_dim, c_dim, w_dim
        self.num_ws = num_ws
        self.num_layers = num_layers
        self.w_avg_beta = w_avg_beta
        if embed_features is None:
            embed_features = w_dim
        if c_dim == 0:
            embed_features = 0
        if layer_features is None:
            layer_features = w_dim
        features = [z_dim + embed_features] + [layer_features] * (num_layers - 1) + [w_dim]
        if c_dim > 0:
            self.embed = FullyConnectedLayer(c_dim, embed_features)
        for idx in range(num_layers):
            setattr(self, f"fc{idx}", FullyConnectedLayer(
                features[idx], features[idx + 1], activation=activation,
                lr_multiplier=lr_multiplier))
        if num_ws is not None and w_avg_beta is not None:
            self.register_buffer("w_avg", torch.zeros([w_dim]))

    def forward(self, z: torch.Tensor | None, c: torch.Tensor | None = None,
                truncation_psi: float = 1.0, truncation_cutoff: int | None = None,
                skip_w_avg_update: bool = False) -> torch.Tensor:
        x = None
        if self.z_dim > 0:
            x = _normalize_2nd_moment(z.to(torch.float32))
        if self.c_dim > 0:
            y = _normalize_2nd_moment(self.embed(c.to(torch.float32)))
            x = torch.cat([x, y], dim=1) if x is not None else y
        for idx in range(self.num_layers):
            x = getattr(self, f"fc{idx}")(x)
        if self.w_avg_beta is not None and self.training and not skip_w_avg_update:
            with torch.no_grad():
                self.w_avg.copy_(x.detach().mean(dim=0).lerp(self.w_avg, self.w_avg_beta))
        if self.num_ws is not None:
            x = x.unsqueeze(1).repeat([1, self.num_ws, 1])
        if truncation_psi != 1:
            if self.w_avg_beta is None:
                raise ValueError("truncation needs w_avg (w_avg_beta is None)")
            if self.num_ws is None or truncation_cutoff is None:
                x = self.w_avg.lerp(x, truncation_psi)
            else:
                x = x.clone()
                x[:, :truncation_cutoff] = self.w_avg.lerp(x[:, :truncation_cutoff], truncation_psi)
        return x


class SynthesisLayer(nn.Module):
    """Modulated 3×3 conv (+demod), optional 2× up, noise, bias, lrelu·√2, clamp."""

    def __init__(self, in_channels: int, out_channels: int, w_dim: int, resolution: int,
                 kernel_size: int = 3, up: int = 1, use_noise: bool = True,
                 activation: str = "lrelu", resample_filter: Sequence[float] = (1, 3, 3, 1),
                 conv_clamp: float | None = None, channels_last: bool = False):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.resolution = resolution
        self.up = up
        self.use_noise = use_noise
        self.activation = activation
        self.conv_clamp = conv_clamp
        self.padding = kernel_size // 2
        self.register_buffer("resample_filter", setup_filter(resample_filter))
        self.affine = FullyConnectedLayer(w_dim, in_channels, bias_init=1)
        self.weight = nn.Parameter(torch.randn([out_channels, in_channels, kernel_size, kernel_size]))
        if use_noise:
            self.register_buffer("noise_const", torch.randn([resolution, resolution]))
            self.noise_strength = nn.Parameter(torch.zeros([]))
        self.bias = nn.Parameter(torch.zeros([out_channels]))

    def forward(self, x: torch.Tensor, w: torch.Tensor, noise_mode: str = "random",
                gain: float = 1.0, fused_modconv: bool | None = None) -> torch.Tensor:
        if noise_mode not in ("random", "const", "none"):
            raise ValueError(f"noise_mode must be random/const/none, got {noise_mode!r}")
        styles = self.affine(w)
        noise = None
        if self.use_noise and noise_mode == "random":
            noise = torch.randn([x.shape[0], 1, self.resolution, self.resolution],
                                device=x.device, dtype=x.dtype) * self.noise_strength
        elif self.use_noise and noise_mode == "const":
            noise = self.noise_const * self.noise_strength
        x = modulated_conv2d(x, self.weight, styles, noise=noise, up=self.up,
                             padding=self.padding, resample_filter=self.resample_filter,
                             fused=(not self.training) if fused_modconv is None else fused_modconv)
        clamp = self.conv_clamp * gain if self.conv_clamp is not None else None
        return _bias_act(x, self.bias, act=self.activation, gain=gain, clamp=clamp)


class ToRGBLayer(nn.Module):
    """Modulated 1×1 conv without demodulation; styles scaled by 1/√(in·k²); bias; clamp."""

    def __init__(self, in_channels: int, out_channels: int, w_dim: int, kernel_size: int = 1,
                 conv_clamp: float | None = None, channels_last: bool = False):
        super().__init__()
        self.conv_clamp = conv_clamp
        self.affine = FullyConnectedLayer(w_dim, in_channels, bias_init=1)
        self.weight = nn.Parameter(torch.randn([out_channels, in_channels, kernel_size, kernel_size]))
        self.bias = nn.Parameter(torch.zeros([out_channels]))
        self.weight_gain = 1 / math.sqrt(in_channels * kernel_size ** 2)

    def forward(self, x: torch.Tensor, w: torch.Tensor,
                fused_modconv: bool | None = None) -> torch.Tensor:
        styles = self.affine(w) * self.weight_gain
        x = modulated_conv2d(x, self.weight, styles, demodulate=False,
                             fused=(not self.training) if fused_modconv is None else fused_modconv)
        return _bias_act(x, self.bias, act="linear", clamp=self.conv_clamp)


class SynthesisBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, w_dim: int, resolution: int,
                 img_channels: int, is_last: bool, architecture: str = "skip",
                 resample_filter: Sequence[float] = (1, 3, 3, 1), conv_clamp: float | None = None,
                 use_fp16: bool = False, fp16_channels_last: bool = False, **layer_kwargs):
        super().__init__()
        if architecture not in ("orig", "skip"):
            raise ValueError(f"generator architecture {architecture!r} is not supported (supported: skip, orig)")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.w_dim = w_dim
        self.resolution = resolution
        self.img_channels = img_channels
        self.is_last = is_last
        self.architecture = architecture
        self.register_buffer("resample_filter", setup_filter(resample_filter))
        self.num_conv = 0
        self.num_torgb = 0
        if in_channels == 0:
            self.const = nn.Parameter(torch.randn([out_channels, resolution, resolution]))
        else:
            self.conv0 = SynthesisLayer(in_channels, out_channels, w_dim=w_dim,
                                        resolution=resolution, up=2,
                                        resample_filter=resample_filter, conv_clamp=conv_clamp,
                                        **layer_kwargs)
            self.num_conv += 1
        self.conv1 = SynthesisLayer(out_channels, out_channels, w_dim=w_dim, resolution=resolution,
                                    resample_filter=resample_filter, conv_clamp=conv_clamp,
                                    **layer_kwargs)
        self.num_conv += 1
        if is_last or architecture == "skip":
            self.torgb = ToRGBLayer(out_channels, img_channels, w_dim=w_dim, conv_clamp=conv_clamp)
            self.num_torgb += 1

    def forward(self, x: torch.Tensor | None, img: torch.Tensor | None, ws: torch.Tensor,
                noise_mode: str = "random", force_fp32: bool = True, **_ignored):
        """``ws``: [N, num_conv + num_torgb, w_dim].  Returns (x, img)."""
        w_iter = iter(ws.unbind(dim=1))
        if self.in_channels == 0:
            x = self.const.to(torch.float32).unsqueeze(0).repeat([ws.shape[0], 1, 1, 1])
            x = self.conv1(x, next(w_iter), noise_mode=noise_mode)
        else:
            x = x.to(torch.float32)
            x = self.conv0(x, next(w_iter), noise_mode=noise_mode)
            x = self.conv1(x, next(w_iter), noise_mode=noise_mode)
        if img is not None:
            img = upsample2d(img, self.resample_filter)
        if self.is_last or self.architecture == "skip":
            y = self.torgb(x, next(w_iter)).to(torch.float32)
            img = img + y if img is not None else y
        return x, img


class SynthesisNetwork(nn.Module):
    def __init__(self, w_dim: int, img_resolution: int, img_channels: int,
                 channel_base: int = 32768, channel_max: int = 512, num_fp16_res: int = 0,
                 **block_kwargs):
        super().__init__()
        if img_resolution < 4 or img_resolution & (img_resolution - 1):
            raise ValueError("img_resolution must be a power of two >= 4")
        self.w_dim = w_dim
        self.img_resolution = img_resolution
        self.img_resolution_log2 = int(math.log2(img_resolution))
        self.img_channels = img_channels
        self.block_resolutions = [2 ** i for i in range(2, self.img_resolution_log2 + 1)]
        self.channels_dict = {r: min(channel_base // r, channel_max) for r in self.block_resolutions}
        self.num_fp16_res = num_fp16_res  # ignored: always float32 (force_fp32)
        self.num_ws = 0
        for r in self.block_resolutions:
            in_ch = self.channels_dict[r // 2] if r > 4 else 0
            block = SynthesisBlock(in_ch, self.channels_dict[r], w_dim=w_dim, resolution=r,
                                   img_channels=img_channels, is_last=(r == img_resolution),
                                   **block_kwargs)
            self.num_ws += block.num_conv
            if r == img_resolution:
                self.num_ws += block.num_torgb
            setattr(self, f"b{r}", block)

    # -- helpers -----------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self.block_resolutions)

    def blocks(self) -> list[SynthesisBlock]:
        return [getattr(self, f"b{r}") for r in self.block_resolutions]

    def split_ws(self, ws: torch.Tensor) -> list[torch.Tensor]:
        """Per-block slices; each block's toRGB shares its w with the next block's conv0."""
        ws = self.broadcast_ws(ws)
        out, idx = [], 0
        for block in self.blocks():
            out.append(ws.narrow(1, idx, block.num_conv + block.num_torgb))
            idx += block.num_conv
        return out

    def broadcast_ws(self, ws: torch.Tensor) -> torch.Tensor:
        """[N, w_dim] or [N, 1, w_dim] → [N, num_ws, w_dim]; [N, num_ws, w_dim] unchanged."""
        if ws.ndim == 2:
            ws = ws.unsqueeze(1)
        if ws.shape[1] == 1 and self.num_ws != 1:
            ws = ws.repeat([1, self.num_ws, 1])
        if ws.shape[1] != self.num_ws or ws.shape[2] != self.w_dim:
            raise ValueError(f"ws must be [N,{self.num_ws},{self.w_dim}], got {list(ws.shape)}")
        return ws.to(torch.float32)

    def block_index(self, resolution: int) -> int:
        return self.block_resolutions.index(resolution)

    def feature_shape(self, block_index: int) -> tuple[int, int, int]:
        """Shape (C, H, W) of the *input* features of block ``block_index`` (>=1)."""
        if block_index < 1:
            raise ValueError("block 0 starts from its learned constant (no input features)")
        r = self.block_resolutions[block_index - 1]
        return (self.channels_dict[r], r, r)

    # -- forward passes ------------------------------------------------------------------
    def forward_range(self, ws: torch.Tensor, start: int = 0, end: int | None = None,
                      x: torch.Tensor | None = None, img: torch.Tensor | None = None,
                      noise_mode: str = "random", **_ignored):
        """Run blocks ``start..end`` (inclusive, 0-based: 0 → b4).

        ``x`` is the input feature map of block ``start`` (ignored for block 0, which uses
        its constant); ``img`` the RGB skip image accumulated so far (``None`` drops the
        toRGB contributions of the skipped blocks, as in IF-GMI).  Returns ``(x, img)``
        after block ``end``.
        """
        end = self.num_blocks - 1 if end is None else end
        if not (0 <= start <= end < self.num_blocks):
            raise ValueError(f"need 0 <= start <= end < {self.num_blocks}; got {start}, {end}")
        if start > 0 and x is None:
            raise ValueError(f"block {start} needs input features x")
        block_ws = self.split_ws(ws)
        for k in range(start, end + 1):
            x, img = self.blocks()[k](x, img, block_ws[k], noise_mode=noise_mode)
        return x, img

    def forward(self, ws: torch.Tensor, noise_mode: str = "random", force_fp32: bool = True,
                **_ignored) -> torch.Tensor:
        return self.forward_range(ws, 0, None, noise_mode=noise_mode)[1]

    def forward_from(self, block_index: int, features: torch.Tensor | None, ws: torch.Tensor,
                     img: torch.Tensor | None = None, noise_mode: str = "const") -> torch.Tensor:
        """Image synthesised starting at block ``block_index`` from the output ``features``
        of block ``block_index-1`` (IF-GMI ``set_layer(k, end)``).  With ``img=None`` earlier
        toRGB contributions are dropped (IF-GMI semantics, docs/sources.md#if-gmi); pass the skip
        image returned by :meth:`block_features` to reproduce the full synthesis exactly."""
        return self.forward_range(ws, block_index, None, x=features, img=img,
                                  noise_mode=noise_mode)[1]

    def block_features(self, ws: torch.Tensor, block_index: int, start: int = 0,
                       x: torch.Tensor | None = None, img: torch.Tensor | None = None,
                       noise_mode: str = "const"):
        """Output ``(x, img)`` of block ``block_index`` (IF-GMI ``set_layer(start, k)``)."""
        return self.forward_range(ws, start, block_index, x=x, img=img, noise_mode=noise_mode)

    def all_block_features(self, ws: torch.Tensor, noise_mode: str = "const") -> list:
        """List of ``(x, img)`` after every block (index k = block k)."""
        block_ws = self.split_ws(ws)
        x = img = None
        out = []
        for k, block in enumerate(self.blocks()):
            x, img = block(x, img, block_ws[k], noise_mode=noise_mode)
            out.append((x, img))
        return out


class Generator(nn.Module):
    def __init__(self, z_dim: int = 512, c_dim: int = 0, w_dim: int = 512,
                 img_resolution: int = 1024, img_channels: int = 3,
                 mapping_kwargs: dict | None = None, synthesis_kwargs: dict | None = None,
                 **extra_synthesis_kwargs):
        super().__init__()
        mapping_kwargs = dict(mapping_kwargs or {})
        synthesis_kwargs = dict(synthesis_kwargs or {})
        synthesis_kwargs.update(extra_synthesis_kwargs)
        self.z_dim, self.c_dim, self.w_dim = z_dim, c_dim, w_dim
        self.img_resolution, self.img_channels = img_resolution, img_channels
        self.init_kwargs = dict(z_dim=z_dim, c_dim=c_dim, w_dim=w_dim,
                                img_resolution=img_resolution, img_channels=img_channels,
                                mapping_kwargs=dict(mapping_kwargs),
                                synthesis_kwargs=dict(synthesis_kwargs))
        self.synthesis = SynthesisNetwork(w_dim=w_dim, img_resolution=img_resolution,
                                          img_channels=img_channels, **synthesis_kwargs)
        self.num_ws = self.synthesis.num_ws
        self.mapping = MappingNetwork(z_dim=z_dim, c_dim=c_dim, w_dim=w_dim,
                                      num_ws=self.num_ws, **mapping_kwargs)

    def forward(self, z: torch.Tensor, c: torch.Tensor | None = None,
                truncation_psi: float = 1.0, truncation_cutoff: int | None = None,
                noise_mode: str = "random", **synthesis_kwargs) -> torch.Tensor:
        ws = self.mapping(z, c, truncation_psi=truncation_psi, truncation_cutoff=truncation_cutoff)
        return self.synthesis(ws, noise_mode=noise_mode, **synthesis_kwargs)

    @classmethod
    def from_init_kwargs_and_state(cls, init_kwargs: dict, state_dict: dict,
                                   strict: bool = True) -> "Generator":
        kw = dict(init_kwargs)
        G = cls(**kw)
        G.load_state_dict(state_dict, strict=strict)
        return G.eval().requires_grad_(False)

    @classmethod
    def from_pickle(cls, path, key: str = "G_ema", strict: bool = True) -> "Generator":
        """Build from an NVIDIA StyleGAN2-ADA pickle via the safe loader (eval mode, no grad)."""
        from .safe_pickle import load_stylegan_pickle

        loaded = load_stylegan_pickle(path, key=key)
        if loaded["class_name"] != "Generator":
            raise ValueError(f"{key!r} is a {loaded['class_name']}, not a Generator")
        return cls.from_init_kwargs_and_state(loaded["init_kwargs"], loaded["state_dict"],
                                              strict=strict)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ---------------------------------------------------------------------------------------
# Discriminator (docs/sources.md#stylegan2-discriminator; 'resnet' architecture) — needed to train
# the embedded prior and for PPDG's projection term.
# ---------------------------------------------------------------------------------------

class Conv2dLayer(nn.Module):
    """Equalised conv (weight·1/√(in·k²)), optional 2× FIR down-sampling, bias, act·gain, clamp."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, bias: bool = True,
                 activation: str = "linear", down: int = 1,
                 resample_filter: Sequence[float] = (1, 3, 3, 1),
                 conv_clamp: float | None = None, channels_last: bool = False,
                 trainable: bool = True):
        super().__init__()
        if down not in (1, 2):
            raise ValueError("only down=1 or 2 is supported")
        self.activation = activation
        self.down = down
        self.conv_clamp = conv_clamp
        self.register_buffer("resample_filter", setup_filter(resample_filter))
        self.padding = kernel_size // 2
        self.weight_gain = 1 / math.sqrt(in_channels * kernel_size ** 2)
        self.act_gain = _SQRT2 if activation in ("lrelu", "relu") else 1.0  # documentation only
        self.weight = nn.Parameter(torch.randn([out_channels, in_channels, kernel_size, kernel_size]))
        self.bias = nn.Parameter(torch.zeros([out_channels])) if bias else None

    def forward(self, x: torch.Tensor, gain: float = 1.0) -> torch.Tensor:
        w = self.weight * self.weight_gain
        k = w.shape[-1]
        if self.down == 1:
            x = F.conv2d(x, w, padding=self.padding)
        elif k == 1:  # FIR (pad 1 all sides), keep every 2nd pixel, then 1×1 conv
            fw = self.resample_filter.shape[-1]
            p0, p1 = (fw - 2 + 1) // 2 + self.padding, (fw - 2) // 2 + self.padding
            x = upfirdn2d(x, self.resample_filter, down=2, padding=(p0, p1, p0, p1))
            x = F.conv2d(x, w)
        else:  # pad (2 for 3×3), FIR, stride-2 conv without padding
            fw = self.resample_filter.shape[-1]
            p0, p1 = (fw - 2 + 1) // 2 + self.padding, (fw - 2) // 2 + self.padding
            x = upfirdn2d(x, self.resample_filter, padding=(p0, p1, p0, p1))
            x = F.conv2d(x, w, stride=2)
        clamp = self.conv_clamp * gain if self.conv_clamp is not None else None
        return _bias_act(x, self.bias, act=self.activation, gain=gain, clamp=clamp)


class DiscriminatorBlock(nn.Module):
    def __init__(self, in_channels: int, tmp_channels: int, out_channels: int, resolution: int,
                 img_channels: int, architecture: str = "resnet", activation: str = "lrelu",
                 resample_filter: Sequence[float] = (1, 3, 3, 1), conv_clamp: float | None = None,
                 **_ignored):
        super().__init__()
        if architecture != "resnet":
            raise ValueError(f"discriminator architecture {architecture!r} is not supported (supported: resnet)")
        self.in_channels = in_channels
        self.resolution = resolution
        self.register_buffer("resample_filter", setup_filter(resample_filter))
        kw = dict(resample_filter=resample_filter, conv_clamp=conv_clamp)
        if in_channels == 0:
            self.fromrgb = Conv2dLayer(img_channels, tmp_channels, 1, activation=activation, **kw)
        self.conv0 = Conv2dLayer(tmp_channels, tmp_channels, 3, activation=activation, **kw)
        self.conv1 = Conv2dLayer(tmp_channels, out_channels, 3, activation=activation, down=2, **kw)
        # NVIDIA's DiscriminatorBlock (training/networks.py, stylegan2-ada-pytorch) builds the
        # resnet skip layer without conv_clamp: only fromrgb/conv0/conv1 are clamped.
        self.skip = Conv2dLayer(tmp_channels, out_channels, 1, bias=False, down=2,
                                resample_filter=resample_filter)

    def forward(self, x: torch.Tensor | None, img: torch.Tensor | None):
        if self.in_channels == 0:
            y = self.fromrgb(img.to(torch.float32))
            x = x + y if x is not None else y
            img = None
        y = self.skip(x, gain=math.sqrt(0.5))
        x = self.conv0(x)
        x = self.conv1(x, gain=math.sqrt(0.5))
        return y + x, img


class MinibatchStdLayer(nn.Module):
    def __init__(self, group_size: int | None, num_channels: int = 1):
        super().__init__()
        self.group_size = group_size
        self.num_channels = num_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N, C, H, W = x.shape
        G = min(self.group_size, N) if self.group_size is not None else N
        if N % G:
            raise ValueError(f"batch size {N} not divisible by mbstd group size {G}")
        Fc = self.num_channels
        y = x.reshape(G, -1, Fc, C // Fc, H, W)
        y = y - y.mean(dim=0)
        y = (y.square().mean(dim=0) + 1e-8).sqrt()
        y = y.mean(dim=[2, 3, 4]).reshape(-1, Fc, 1, 1).repeat(G, 1, H, W)
        return torch.cat([x, y], dim=1)


class DiscriminatorEpilogue(nn.Module):
    def __init__(self, in_channels: int, cmap_dim: int, resolution: int, img_channels: int,
                 architecture: str = "resnet", mbstd_group_size: int | None = 4,
                 mbstd_num_channels: int = 1, activation: str = "lrelu",
                 conv_clamp: float | None = None):
        super().__init__()
        self.cmap_dim = cmap_dim
        self.mbstd = MinibatchStdLayer(mbstd_group_size, mbstd_num_channels) if mbstd_num_channels > 0 else None
        self.conv = Conv2dLayer(in_channels + mbstd_num_channels, in_channels, 3,
                                activation=activation, conv_clamp=conv_clamp)
        self.fc = FullyConnectedLayer(in_channels * resolution ** 2, in_channels, activation=activation)
        self.out = FullyConnectedLayer(in_channels, 1 if cmap_dim == 0 else cmap_dim)

    def forward(self, x: torch.Tensor, cmap: torch.Tensor | None = None) -> torch.Tensor:
        if self.mbstd is not None:
            x = self.mbstd(x)
        x = self.conv(x)
        x = self.fc(x.flatten(1))
        x = self.out(x)
        if self.cmap_dim > 0:
            x = (x * cmap).sum(dim=1, keepdim=True) * (1 / math.sqrt(self.cmap_dim))
        return x


class Discriminator(nn.Module):
    """StyleGAN2-ADA 'resnet' discriminator; state-dict names as in the official ``D``."""

    def __init__(self, c_dim: int = 0, img_resolution: int = 1024, img_channels: int = 3,
                 architecture: str = "resnet", channel_base: int = 32768, channel_max: int = 512,
                 num_fp16_res: int = 0, conv_clamp: float | None = None, cmap_dim: int | None = None,
                 block_kwargs: dict | None = None, mapping_kwargs: dict | None = None,
                 epilogue_kwargs: dict | None = None):
        super().__init__()
        self.init_kwargs = dict(c_dim=c_dim, img_resolution=img_resolution, img_channels=img_channels,
                                architecture=architecture, channel_base=channel_base,
                                channel_max=channel_max, num_fp16_res=num_fp16_res,
                                conv_clamp=conv_clamp, cmap_dim=cmap_dim,
                                block_kwargs=dict(block_kwargs or {}),
                                mapping_kwargs=dict(mapping_kwargs or {}),
                                epilogue_kwargs=dict(epilogue_kwargs or {}))
        self.c_dim = c_dim
        self.img_resolution = img_resolution
        self.img_channels = img_channels
        log2 = int(math.log2(img_resolution))
        self.block_resolutions = [2 ** i for i in range(log2, 2, -1)]
        channels = {r: min(channel_base // r, channel_max) for r in self.block_resolutions + [4]}
        if cmap_dim is None:
            cmap_dim = channels[4]
        if c_dim == 0:
            cmap_dim = 0
        common = dict(img_channels=img_channels, architecture=architecture, conv_clamp=conv_clamp)
        for r in self.block_resolutions:
            in_ch = channels[r] if r < img_resolution else 0
            setattr(self, f"b{r}", DiscriminatorBlock(in_ch, channels[r], channels[r // 2], r,
                                                      **dict(block_kwargs or {}), **common))
        if c_dim > 0:
            self.mapping = MappingNetwork(z_dim=0, c_dim=c_dim, w_dim=cmap_dim, num_ws=None,
                                          w_avg_beta=None, **dict(mapping_kwargs or {}))
        self.b4 = DiscriminatorEpilogue(channels[4], cmap_dim=cmap_dim, resolution=4,
                                        **dict(epilogue_kwargs or {}), **common)

    def forward(self, img: torch.Tensor, c: torch.Tensor | None = None, **_ignored) -> torch.Tensor:
        x = None
        for r in self.block_resolutions:
            x, img = getattr(self, f"b{r}")(x, img)
        cmap = self.mapping(None, c) if self.c_dim > 0 else None
        return self.b4(x, cmap)

    @classmethod
    def from_pickle(cls, path, key: str = "D", strict: bool = True) -> "Discriminator":
        from .safe_pickle import load_stylegan_pickle

        loaded = load_stylegan_pickle(path, key=key)
        if loaded["class_name"] != "Discriminator":
            raise ValueError(f"{key!r} is a {loaded['class_name']}, not a Discriminator")
        D = cls(**loaded["init_kwargs"])
        D.load_state_dict(loaded["state_dict"], strict=strict)
        return D.eval().requires_grad_(False)


# ---------------------------------------------------------------------------------------
# Small-prior training (embedded demo): non-saturating logistic GAN loss + lazy R1.
# ---------------------------------------------------------------------------------------

def _infinite_batches(loader):
    while True:
        n = 0
        for x, _ in loader:
            n += 1
            yield x
        if n == 0:
            raise ValueError("the data loader yields no batches (dataset smaller than batch size?)")


def train_small_generator(public_dataset_root, resolution: int = 32, steps: int = 1000, *,
                          split: str = "public", batch_size: int = 16, z_dim: int = 64,
                          w_dim: int = 64, mapping_layers: int = 2, channel_base: int = 1024,
                          channel_max: int = 64, d_channel_base: int | None = None,
                          d_channel_max: int | None = None, lr: float = 0.0025,
                          betas: tuple[float, float] = (0.0, 0.99), r1_gamma: float = 1.0,
                          r1_interval: int = 4, ema_half_life_images: int | None = None,
                          mbstd_group_size: int | None = 4, mirror: bool = True, seed: int = 0,
                          device: str | torch.device = "cpu", out_path=None,
                          log_every: int = 0, log_fn=print, images: torch.Tensor | None = None):
    """Train a small StyleGAN2 (same :class:`Generator` class as the official prior) on the
    attacker's public pool ``public_dataset_root`` (manifest format, split ``split``).

    Loss: non-saturating logistic (G: softplus(−D(G(z))); D: softplus(D(fake)) +
    softplus(−D(real))) with lazy R1 on reals every ``r1_interval`` steps
    (γ/2·‖∇D(real)‖²·interval; Adam lr/betas of D scaled by interval/(interval+1) as in
    StyleGAN2).  G_ema with half-life ``ema_half_life_images`` (default: a tenth of the
    images seen, ≥ one batch).  Images are read at ``resolution`` in [−1, 1] (optionally
    x-flipped, ``mirror``).  ``images`` (a [N, C, R, R] tensor in [−1, 1]) replaces the
    dataset when given.  If ``out_path`` is given the networks are written with
    :func:`atat.inversion.safe_pickle.save_stylegan_pickle` (loadable by
    :meth:`Generator.from_pickle`).

    Returns ``{'G_ema', 'G', 'D', 'history'}``; ``history`` holds per-step losses.
    """
    from .safe_pickle import save_stylegan_pickle

    device = torch.device(device)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    if images is not None:
        data = images.to(torch.float32)
        if data.shape[-1] != resolution or data.shape[-2] != resolution:
            raise ValueError(f"images must be {resolution}x{resolution}")

        def batches():
            while True:
                perm = torch.randperm(len(data), generator=gen)
                for i in range(0, len(perm) - batch_size + 1, batch_size):
                    yield data[perm[i:i + batch_size]]
                if len(data) < batch_size:
                    raise ValueError("fewer images than batch_size")
        it = batches()
        img_channels = data.shape[1]
    else:
        from atat.data.loading import make_loader

        loader = make_loader(public_dataset_root, split, resolution=resolution,
                             batch_size=batch_size, train=False, shuffle=True, drop_last=True,
                             generator=gen)
        it = _infinite_batches(loader)
        img_channels = 3

    G = Generator(z_dim=z_dim, c_dim=0, w_dim=w_dim, img_resolution=resolution,
                  img_channels=img_channels, mapping_kwargs=dict(num_layers=mapping_layers),
                  synthesis_kwargs=dict(channel_base=channel_base, channel_max=channel_max,
                                        conv_clamp=256)).to(device).train()
    D = Discriminator(c_dim=0, img_resolution=resolution, img_channels=img_channels,
                      channel_base=d_channel_base or channel_base,
                      channel_max=d_channel_max or channel_max, conv_clamp=256,
                      epilogue_kwargs=dict(mbstd_group_size=mbstd_group_size)).to(device).train()
    G_ema = Generator(**G.init_kwargs).to(device).eval()
    G_ema.load_state_dict(G.state_dict())
    G_ema.requires_grad_(False)

    ratio = r1_interval / (r1_interval + 1) if r1_interval > 0 else 1.0
    opt_G = torch.optim.Adam(G.parameters(), lr=lr, betas=betas, eps=1e-8)
    opt_D = torch.optim.Adam(D.parameters(), lr=lr * ratio,
                             betas=(betas[0] ** ratio, betas[1] ** ratio), eps=1e-8)
    half_life = ema_half_life_images or max(batch_size, steps * batch_size // 10)
    ema_beta = 0.5 ** (batch_size / max(half_life, 1e-8))
    history = {"loss_G": [], "loss_D": [], "r1": []}

    for step in range(steps):
        real = next(it).to(device)
        if mirror:
            flip = torch.rand(real.shape[0], generator=gen) < 0.5
            real = torch.where(flip.to(device)[:, None, None, None], real.flip(3), real)

        # --- G: non-saturating loss
        G.requires_grad_(True)
        D.requires_grad_(False)
        z = torch.randn(batch_size, z_dim, device=device)
        loss_G = F.softplus(-D(G(z, noise_mode="random"))).mean()
        opt_G.zero_grad(set_to_none=True)
        loss_G.backward()
        opt_G.step()

        # --- D: logistic loss (+ lazy R1)
        G.requires_grad_(False)
        D.requires_grad_(True)
        with torch.no_grad():
            fake = G(torch.randn(batch_size, z_dim, device=device), noise_mode="random")
        loss_D = F.softplus(D(fake)).mean() + F.softplus(-D(real)).mean()
        r1_val = float("nan")
        if r1_interval > 0 and r1_gamma > 0 and step % r1_interval == 0:
            real_r = real.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(D(real_r).sum(), real_r, create_graph=True)
            r1 = grad.square().sum(dim=[1, 2, 3]).mean()
            loss_D = loss_D + r1 * (r1_gamma / 2) * r1_interval
            r1_val = float(r1.detach())
        opt_D.zero_grad(set_to_none=True)
        loss_D.backward()
        opt_D.step()

        # --- EMA
        with torch.no_grad():
            for p_ema, p in zip(G_ema.parameters(), G.parameters()):
                p_ema.copy_(p.detach().lerp(p_ema, ema_beta))
            for b_ema, b in zip(G_ema.buffers(), G.buffers()):
                b_ema.copy_(b)

        history["loss_G"].append(float(loss_G.detach()))
        history["loss_D"].append(float(loss_D.detach()))
        history["r1"].append(r1_val)
        if log_every and (step % log_every == 0 or step == steps - 1):
            log_fn(f"[stylegan2-small] step {step + 1}/{steps} loss_G {history['loss_G'][-1]:.4f} "
                   f"loss_D {history['loss_D'][-1]:.4f}")

    G.eval().requires_grad_(False)
    D.eval().requires_grad_(False)
    if out_path is not None:
        save_stylegan_pickle(out_path, G_ema.cpu(), G=G.cpu(), D=D.cpu(),
                             module_src="# atat.inversion.stylegan2 (own implementation)\n",
                             training_set_kwargs=dict(path=str(public_dataset_root), split=split,
                                                      resolution=resolution))
    return {"G_ema": G_ema, "G": G, "D": D, "history": history}
