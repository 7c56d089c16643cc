"""Painting and photographing helpers shared by the synthetic datasets (:mod:`atat.data.synthfaces`,
:mod:`atat.data.synthdogs`): platform-stable RNG streams, colour arithmetic, the normalised-
coordinate painter, the pool of distinct classes and the "photograph" of a painted layer
(placement, background, occluder, camera). Every draw happens in a fixed order, so an image is
reproducible from its RNG.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

#: a pool's name -> (class-name prefix, stream code)
POOLS = {"private": ("priv", 0), "public": ("pub", 1)}
#: a class is redrawn when its signature differs from an earlier one in fewer entries
MIN_DISCRETE_DIFF = 3


def _rng(*keys: int) -> np.random.RandomState:
    """Independent, platform-stable RandomState for a tuple of non-negative int keys."""
    state = np.random.SeedSequence([int(k) for k in keys]).generate_state(4)
    return np.random.RandomState(state)



def _choice(rng: np.random.RandomState, n: int, p: np.ndarray | None = None) -> int:
    if p is None:
        return int(rng.randint(n))
    return int(rng.choice(n, p=p / p.sum()))



def _u(rng: np.random.RandomState, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi))



def _clip_rgb(c) -> tuple[int, int, int]:
    return tuple(int(round(min(255.0, max(0.0, float(v))))) for v in c)  # type: ignore[return-value]



def _mix(a, b, t: float) -> tuple[int, int, int]:
    return _clip_rgb([(1 - t) * x + t * y for x, y in zip(a, b)])



def _scale(c, f: float) -> tuple[int, int, int]:
    return _clip_rgb([f * x for x in c])



def draw_distinct_pool(n: int, pool: str, seed: int, stream: int,
                       draw: Callable[[np.random.RandomState], dict[str, Any]],
                       signature: Callable[[dict[str, Any]], tuple], what: str) -> list[dict[str, Any]]:
    """The first ``n`` classes of ``pool``: class ``k`` is ``draw(_rng(seed, stream, pool code,
    k, attempt))`` for the first attempt whose ``signature`` differs from every earlier class
    of the pool in at least ``MIN_DISCRETE_DIFF`` entries (so growing a pool keeps its first
    classes), named ``<prefix>_<k:04d>``. Shared by the face identities and the dog breeds."""
    if pool not in POOLS:
        raise ValueError(f"unknown pool {pool!r}; use one of {list(POOLS)}")
    prefix, code = POOLS[pool]
    out: list[dict[str, Any]] = []
    sigs: list[tuple] = []
    for k in range(n):
        for attempt in range(10_000):
            item = draw(_rng(seed, stream, code, k, attempt))
            sig = signature(item)
            if all(sum(x != y for x, y in zip(sig, s)) >= MIN_DISCRETE_DIFF for s in sigs):
                break
        else:  # pragma: no cover - practically unreachable
            raise RuntimeError(f"could not draw a distinct {what}")
        out.append({"name": f"{prefix}_{k:04d}", "pool": pool, "index": k, "attempt": attempt, **item})
        sigs.append(sig)
    return out



def _render_size(resolution: int) -> int:
    return int(min(512, max(128, 4 * resolution)))



def _background(rng: np.random.RandomState, R: int, nuisance: float) -> np.ndarray:
    """Background (float RGB, R x R): colour + gradient + texture, drawn at R/2 and upsampled."""
    full = R
    R = max(32, R // 2)
    yy, xx = np.mgrid[0:R, 0:R].astype(np.float32) / R
    base = rng.uniform(30, 230, 3).astype(np.float32)
    other = rng.uniform(30, 230, 3).astype(np.float32)
    ang = rng.uniform(0, 2 * np.pi)
    g = (np.cos(ang) * (xx - 0.5) + np.sin(ang) * (yy - 0.5)) + 0.5
    t = min(1.0, 0.6 * nuisance) * rng.uniform(0, 1)
    img = base[None, None, :] * (1 - t * g[..., None]) + other[None, None, :] * (t * g[..., None])
    kind = ["plain", "stripes", "blobs", "noise", "checker"][_choice(rng, 5)]
    amp = rng.uniform(10, 45) * min(1.0, nuisance)
    if kind == "stripes":
        a2 = rng.uniform(0, np.pi)
        f = rng.uniform(3, 10)
        tex = np.sin(2 * np.pi * f * (np.cos(a2) * xx + np.sin(a2) * yy) + rng.uniform(0, 6.3))
        img = img + amp * tex[..., None] * rng.uniform(0.3, 1.0, 3)[None, None, :]
    elif kind == "blobs":
        for _ in range(rng.randint(3, 8)):
            cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.25)
            m = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))
            img = img + m[..., None] * rng.uniform(-1.5, 1.5, 3)[None, None, :] * amp
    elif kind == "noise":
        k = rng.randint(4, 12)
        small = rng.uniform(-1, 1, (k, k, 3)).astype(np.float32)
        up = np.asarray(
            Image.fromarray(((small + 1) * 127.5).astype(np.uint8)).resize((R, R), Image.Resampling.BICUBIC),
            dtype=np.float32,
        ) / 127.5 - 1
        img = img + amp * 1.5 * up
    elif kind == "checker":
        f = rng.randint(3, 9)
        tex = ((np.floor(xx * f) + np.floor(yy * f)) % 2) * 2 - 1
        img = img + 0.6 * amp * tex[..., None]
    img = Image.fromarray(np.clip(np.round(img), 0, 255).astype(np.uint8)).resize((full, full), Image.Resampling.BILINEAR)
    return np.asarray(img, dtype=np.float32)



class _Painter:
    """Draws on an RGBA layer in normalised canvas coordinates (canvas = [0, 1]^2)."""

    def __init__(self, R: int, margin: float = 0.3):
        self.R = R
        self.off = margin * R
        self.L = int(round(R * (1 + 2 * margin)))
        self.img = Image.new("RGBA", (self.L, self.L), (0, 0, 0, 0))
        self.draw = ImageDraw.Draw(self.img)

    def p(self, x: float, y: float) -> tuple[float, float]:
        return (x * self.R + self.off, y * self.R + self.off)

    def box(self, x0, y0, x1, y1) -> list[float]:
        (a, b), (c, d) = self.p(x0, y0), self.p(x1, y1)
        return [min(a, c), min(b, d), max(a, c), max(b, d)]

    def w(self, width: float) -> int:
        return max(1, int(round(width * self.R)))

    def ellipse(self, cx, cy, rx, ry, fill, outline=None, width=0.0):
        self.draw.ellipse(self.box(cx - rx, cy - ry, cx + rx, cy + ry), fill=_rgba(fill),
                          outline=_rgba(outline), width=self.w(width) if outline is not None else 1)

    def polygon(self, pts, fill, outline=None):
        self.draw.polygon([self.p(x, y) for x, y in pts], fill=_rgba(fill), outline=_rgba(outline))

    def line(self, pts, fill, width):
        self.draw.line([self.p(x, y) for x, y in pts], fill=_rgba(fill), width=self.w(width), joint="curve")

    def mask(self) -> tuple[Image.Image, ImageDraw.ImageDraw]:
        m = Image.new("L", (self.L, self.L), 0)
        return m, ImageDraw.Draw(m)

    def paste(self, colour, mask: Image.Image):
        bbox = mask.getbbox()
        if bbox is None:
            return
        self.img.paste(_rgba(colour), bbox, mask.crop(bbox))



def _rgba(c):
    if c is None:
        return None
    c = _clip_rgb(c)
    return (c[0], c[1], c[2], 255)



def _place_layer(P: _Painter, rng: np.random.RandomState, f: Any, nz: float,
                 rotation: bool) -> Image.Image:
    """Geometric nuisance: the painted layer under a random affine map (scale, rotation,
    translation about the face centre), cropped to the R x R canvas."""
    R = P.R
    sc = math.exp(_u(rng, -0.14, 0.14) * nz)
    ang = math.radians(_u(rng, -12, 12) * nz) if rotation else 0.0
    tx, ty = _u(rng, -0.08, 0.08) * nz, _u(rng, -0.06, 0.06) * nz
    # output pixel (u, v) -> layer pixel: inverse of [translate(c+t) . rot . scale . translate(-c)]
    c0 = np.array([f.cx * R, f.cy * R])
    cos, sin = math.cos(ang), math.sin(ang)
    Minv = np.array([[cos, sin], [-sin, cos]]) / sc
    shift = c0 + np.array([tx * R, ty * R])
    off = np.array([P.off, P.off])
    # layer = Minv @ (out - shift) + c0 + off
    bvec = -Minv @ shift + c0 + off
    coeffs = (Minv[0, 0], Minv[0, 1], bvec[0], Minv[1, 0], Minv[1, 1], bvec[1])
    return P.img.transform((R, R), Image.Transform.AFFINE, coeffs, resample=Image.Resampling.BILINEAR)



def _composite(layer: Image.Image, rng: np.random.RandomState, R: int, nz: float) -> np.ndarray:
    """The face layer over a random background (float RGB, R x R)."""
    bg = _background(rng, R, nz)
    la = np.asarray(layer, dtype=np.float32)
    alpha = la[..., 3:4] / 255.0
    return la[..., :3] * alpha + bg * (1 - alpha)



def _occlude(img: np.ndarray, rng: np.random.RandomState, R: int, nz: float) -> np.ndarray:
    """With probability 0.3·nuisance, an occluder (hand / object / scarf stand-in)."""
    if not rng.rand() < min(1.0, 0.3 * nz):
        return img
    occ = Image.fromarray(np.clip(np.round(img), 0, 255).astype(np.uint8))
    od = ImageDraw.Draw(occ)
    ocol = _clip_rgb(rng.uniform(20, 235, 3))
    ox, oy = _u(rng, 0.25, 0.75) * R, _u(rng, 0.2, 0.8) * R
    ow, oh = _u(rng, 0.08, 0.2) * R, _u(rng, 0.06, 0.16) * R
    kind = _choice(rng, 3)
    if kind == 0:
        od.ellipse([ox - ow, oy - oh, ox + ow, oy + oh], fill=ocol)
    elif kind == 1:
        od.rectangle([ox - ow, oy - oh, ox + ow, oy + oh], fill=ocol)
    else:  # band across the image
        od.rectangle([0, oy - 0.6 * oh, R, oy + 0.6 * oh], fill=ocol)
    return np.asarray(occ, dtype=np.float32)



def _camera(img: np.ndarray, rng: np.random.RandomState, resolution: int, nz: float) -> Image.Image:
    """Downsample to ``resolution``, then lighting gradient, brightness, tint, blur and noise."""
    small = Image.fromarray(np.clip(np.round(img), 0, 255).astype(np.uint8)).resize(
        (resolution, resolution), Image.Resampling.LANCZOS
    )
    arr = np.asarray(small, dtype=np.float32)
    yy, xx = np.mgrid[0:resolution, 0:resolution].astype(np.float32) / max(1, resolution - 1)
    la_ang = rng.uniform(0, 2 * np.pi)
    strength = _u(rng, 0.0, 0.6) * nz
    grad = 1 + strength * (np.cos(la_ang) * (xx - 0.5) + np.sin(la_ang) * (yy - 0.5)) * 2
    bright = math.exp(_u(rng, -0.35, 0.25) * nz)
    tint = np.exp(rng.uniform(-0.15, 0.15, 3) * nz).astype(np.float32)
    arr = arr * (bright * grad)[..., None] * tint[None, None, :]
    arr = np.clip(arr, 0, 255)
    if rng.rand() < 0.25 * min(1.0, nz):
        radius = _u(rng, 0.3, 0.9) * resolution / 64
        arr = np.asarray(
            Image.fromarray(np.round(arr).astype(np.uint8)).filter(ImageFilter.GaussianBlur(radius)),
            dtype=np.float32,
        )
    sigma = _u(rng, 0.0, 12.0) * nz
    arr = arr + rng.normal(0.0, 1.0, arr.shape).astype(np.float32) * sigma
    return Image.fromarray(np.clip(np.round(arr), 0, 255).astype(np.uint8), "RGB")



def photograph(P: _Painter, rng: np.random.RandomState, centre: Any, resolution: int, nz: float,
               rotation: bool = True) -> Image.Image:
    """The painted layer as a photo: placed about ``centre`` (``.cx``, ``.cy``), over a
    background, maybe occluded, through the camera (shared by faces and dogs)."""
    layer = _place_layer(P, rng, centre, nz, rotation)
    img = _composite(layer, rng, P.R, nz)
    img = _occlude(img, rng, P.R, nz)
    return _camera(img, rng, resolution, nz)



def image_rng(seed: int, stream: int, item: dict[str, Any], image_index: int) -> np.random.RandomState:
    """The RNG of image ``image_index`` of class ``item`` (a pool's identity or breed)."""
    return _rng(seed, stream, POOLS[item["pool"]][1], item["index"], image_index)
