"""``synthfaces``: the embedded, procedurally rendered synthetic identity dataset.

Nothing is downloaded and nothing is pretrained: every image is drawn with PIL and NumPy
from a seed, so the same arguments give byte-identical files.

Identities
    Each identity is a fixed set of *visible* facial attributes: face shape and size, skin
    tone, hair colour and style (bald, buzz, short, long, fringe, side part, curly, bun,
    afro), eye spacing / height / size / shape / colour, eyebrow shape / thickness / tilt,
    nose shape / length / width, mouth width / position / lip thickness / lip colour,
    optional beard / goatee / stubble, moustache, mole, freckles, blush, and optional
    accessories (glasses or sunglasses, earrings, beanie or cap).  Accessories are worn in
    ``ACCESSORY_CONSISTENCY`` of the identity's images.  Within a pool, identities are
    drawn one after the other and a candidate is rejected (and redrawn) when it differs
    from an earlier identity of the pool in fewer than ``MIN_DISCRETE_DIFF`` of the
    discrete attributes, so no two identities of a pool are near-duplicates.

Nuisance (per image, scaled by ``nuisance``)
    position jitter, scale, small in-plane rotation, head yaw (inner features shift, ears
    change size), expression (smile/frown, open mouth, eye openness, eyebrow raise, gaze),
    slight hair/skin colour variation, clothing colour, background (colour, gradient and
    texture: plain, stripes, blobs, smooth noise, checker), lighting (brightness, tint,
    directional gradient), optional blur and Gaussian pixel noise.

Pools
    ``private`` (names ``priv_0000``...) and ``public`` (``pub_0000``...) are drawn from
    different sub-seeds of the same generator; the identity names and the images are
    disjoint.  Identity ``k`` of a pool depends only on ``(seed, pool, k)`` and the
    identities ``0..k-1`` of the same pool (so growing a pool keeps its first identities).

On-disk layout (:mod:`atat.data.manifest` format)::

    out_dir/private/{manifest.csv, meta.json, identities.json, images/priv_XXXX/YYYY.png}
    out_dir/public/ {manifest.csv, meta.json, identities.json, images/pub_XXXX/YYYY.png}

The private image list is ordered identity-major (``priv_0000/0000.png``,
``priv_0000/0001.png``, ..., ``priv_0001/0000.png``, ...); :func:`split_indices` over that
list (``split_seed``) gives train/val/test.  Every row of the public pool has split
``public``.  The whole ``out_dir`` is built in a hidden temporary sibling directory and
renamed into place at the end, so an interrupted run leaves no dataset behind.

CLI: ``python -m atat.data.synthfaces --out DIR [--n-private 20 --n-public 40 ...]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFilter

from atat.base.io import install_dir
from atat.data.manifest import split_indices, write_dataset
from atat.data.painting import (
    MIN_DISCRETE_DIFF, POOLS, _background, _camera, _choice, _clip_rgb, _composite, _mix,
    _occlude, _Painter, _place_layer, _render_size, _rgba, _rng, _scale, _u, draw_distinct_pool,
    image_rng, photograph,
)

GENERATOR_VERSION = 1
#: what a population is made of: face identities (this module) or dog breeds
#: (:mod:`atat.data.synthdogs`, the miniature's Stanford Dogs, paper Table 26)
DOMAINS = ("faces", "dogs")
ACCESSORY_CONSISTENCY = 0.75

# Default sizing, calibrated for the demo target: torchvision ResNet-18 from scratch at
# 64 px, Adam lr 1e-3, batch 64, the training augmentation of docs/sources.md#input-pipeline, 10-15
# epochs on the private pool (576 train / 144 val / 80 test images of 20 identities; chance 5 %).
# Measured (CPU, 1 thread, seed 0): nuisance 1.0 -> ~80 % test after 12 epochs (too
# easy), 1.3 -> 55-72 %, 1.2 (default) -> test 64-72 % / val 68-76 % over epochs 6-14.
DEFAULTS = dict(
    n_private_identities=20,
    n_public_identities=40,
    images_per_identity=40,
    public_images_per_identity=20,
    resolution=64,
    seed=0,
    split_seed=42,
    nuisance=1.2,
)

# ------------------------------------------------------------------------------------
# palettes (RGB 0..255)
# ------------------------------------------------------------------------------------
SKIN_TONES = [
    (255, 224, 196), (241, 194, 160), (224, 172, 128), (198, 134, 90),
    (168, 108, 70), (128, 80, 50), (94, 58, 38), (236, 188, 180),
]
HAIR_COLOURS = [
    ("black", (28, 24, 24)), ("dark_brown", (62, 40, 28)), ("brown", (112, 72, 42)),
    ("auburn", (142, 62, 32)), ("blonde", (222, 190, 118)), ("ginger", (200, 112, 54)),
    ("grey", (150, 148, 146)), ("white", (228, 226, 218)), ("blue", (52, 86, 196)),
    ("pink", (224, 106, 170)), ("green", (60, 150, 80)),
]
HAIR_COLOUR_P = np.array([14, 14, 12, 8, 10, 6, 6, 4, 1.5, 1.5, 1], dtype=float)
HAIR_STYLES = ["bald", "buzz", "short", "long", "fringe", "side_part", "curly", "bun", "afro"]
HAIR_STYLE_P = np.array([4, 6, 12, 12, 9, 9, 7, 6, 5], dtype=float)
FACE_SHAPES = ["oval", "round", "square", "heart", "long"]
FACE_ASPECT = {"oval": (1.28, 1.38), "round": (1.08, 1.16), "square": (1.18, 1.26),
               "heart": (1.24, 1.34), "long": (1.42, 1.52)}
EYE_COLOURS = [("brown", (96, 58, 30)), ("dark", (40, 26, 20)), ("blue", (70, 120, 200)),
               ("green", (70, 140, 80)), ("grey", (128, 136, 140)), ("hazel", (150, 112, 50))]
EYE_SHAPES = ["round", "almond", "narrow"]
EYE_ASPECT = {"round": 0.85, "almond": 0.62, "narrow": 0.45}
NOSE_SHAPES = ["triangle", "button", "long", "wide"]
BROW_SHAPES = ["straight", "arched", "angled"]
LIPSTICKS = [(200, 40, 60), (150, 30, 80), (220, 90, 110), (120, 40, 40)]
GLASSES_COLOURS = [(20, 20, 20), (110, 60, 30), (200, 170, 60), (180, 30, 30), (40, 60, 160)]
HAT_COLOURS = [(180, 30, 40), (30, 60, 150), (40, 110, 50), (230, 200, 40), (30, 30, 30),
               (230, 230, 230), (240, 120, 30), (120, 50, 140)]
METALS = [(230, 190, 60), (200, 200, 210), (220, 60, 120), (60, 180, 200)]


# ------------------------------------------------------------------------------------
# RNG helpers
# ------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------
# identities
# ------------------------------------------------------------------------------------
_DISCRETE_KEYS = (
    "face_shape", "skin_idx", "hair_colour", "hair_style", "eye_colour", "eye_shape",
    "nose_shape", "brow_shape", "glasses", "hat", "beard", "moustache", "earrings",
)


def _draw_identity(rng: np.random.RandomState) -> dict[str, Any]:
    face_shape = FACE_SHAPES[_choice(rng, len(FACE_SHAPES))]
    a = _u(rng, 0.165, 0.205)
    aspect = _u(rng, *FACE_ASPECT[face_shape])
    skin_idx = _choice(rng, len(SKIN_TONES))
    skin = _clip_rgb(np.array(SKIN_TONES[skin_idx]) + rng.uniform(-10, 10, 3))
    hc_idx = _choice(rng, len(HAIR_COLOURS), HAIR_COLOUR_P)
    style = HAIR_STYLES[_choice(rng, len(HAIR_STYLES), HAIR_STYLE_P)]
    eye_idx = _choice(rng, len(EYE_COLOURS))
    ident: dict[str, Any] = {
        "face_shape": face_shape,
        "face_half_width": a,
        "face_aspect": aspect,
        "skin_idx": skin_idx,
        "skin": skin,
        "hair_colour": HAIR_COLOURS[hc_idx][0],
        "hair_rgb": HAIR_COLOURS[hc_idx][1],
        "hair_style": style,
        "hairline": _u(rng, 0.42, 0.62),  # fraction of half-height above the centre
        "hair_volume": _u(rng, 1.06, 1.2),
        "part_side": int(rng.choice([-1, 1])),
        "eye_spacing": _u(rng, 0.34, 0.52),  # eye centre offset / a
        "eye_height": _u(rng, 0.0, 0.16),  # above centre, / b
        "eye_size": _u(rng, 0.15, 0.25),  # eye half-width / a
        "eye_shape": EYE_SHAPES[_choice(rng, len(EYE_SHAPES))],
        "eye_colour": EYE_COLOURS[eye_idx][0],
        "eye_rgb": EYE_COLOURS[eye_idx][1],
        "brow_shape": BROW_SHAPES[_choice(rng, len(BROW_SHAPES))],
        "brow_thickness": _u(rng, 0.035, 0.1),  # / a
        "brow_gap": _u(rng, 0.1, 0.24),  # / a
        "brow_tilt": _u(rng, -0.12, 0.12),
        "nose_shape": NOSE_SHAPES[_choice(rng, len(NOSE_SHAPES))],
        "nose_length": _u(rng, 0.2, 0.36),  # / b
        "nose_width": _u(rng, 0.18, 0.36),  # / a
        "mouth_width": _u(rng, 0.48, 0.92),  # / a
        "mouth_pos": _u(rng, 0.46, 0.6),  # below centre, / b
        "lip_thickness": _u(rng, 0.05, 0.14),  # / a
        "lip_rgb": (
            LIPSTICKS[_choice(rng, len(LIPSTICKS))] if rng.rand() < 0.2
            else _clip_rgb(np.array(skin) * np.array([0.82, 0.55, 0.55]) + np.array([30, 0, 0]))
        ),
        "glasses": None,
        "earrings": None,
        "hat": None,
        "beard": None,
        "moustache": False,
        "mole": None,
        "freckles": None,
        "blush": bool(rng.rand() < 0.2),
    }
    if rng.rand() < 0.3:
        ident["glasses"] = {
            "shape": ["round", "square"][_choice(rng, 2)],
            "rgb": GLASSES_COLOURS[_choice(rng, len(GLASSES_COLOURS))],
            "sun": bool(rng.rand() < 0.2),
            "thickness": _u(rng, 0.03, 0.07),
        }
    if rng.rand() < 0.25:
        ident["earrings"] = {"hoop": bool(rng.rand() < 0.5), "rgb": METALS[_choice(rng, len(METALS))]}
    if rng.rand() < 0.15:
        ident["hat"] = {"kind": ["beanie", "cap"][_choice(rng, 2)], "rgb": HAT_COLOURS[_choice(rng, len(HAT_COLOURS))]}
    if rng.rand() < 0.22:
        ident["beard"] = ["full", "goatee", "stubble"][_choice(rng, 3)]
    ident["moustache"] = bool(rng.rand() < 0.2)
    if rng.rand() < 0.3:
        ident["mole"] = [_u(rng, -0.6, 0.6), _u(rng, -0.2, 0.6)]  # (x/a, y/b) offset
    if rng.rand() < 0.15:
        ident["freckles"] = [[_u(rng, 0.2, 0.75) * s, _u(rng, 0.05, 0.35)] for s in (-1, 1) for _ in range(6)]
    return ident


def _discrete_signature(ident: dict[str, Any]) -> tuple:
    return (
        ident["face_shape"], ident["skin_idx"], ident["hair_colour"], ident["hair_style"],
        ident["eye_colour"], ident["eye_shape"], ident["nose_shape"], ident["brow_shape"],
        ident["glasses"] is not None, ident["hat"] is not None, ident["beard"],
        ident["moustache"], ident["earrings"] is not None,
    )


def make_identities(n: int, pool: str, seed: int = 0) -> list[dict[str, Any]]:
    """The first ``n`` identities of ``pool`` (``private``/``public``) for ``seed``."""
    return draw_distinct_pool(n, pool, seed, 1, _draw_identity, _discrete_signature, "identity")


# ------------------------------------------------------------------------------------
# rendering
# ------------------------------------------------------------------------------------


def _face_mask(P: _Painter, shape: str, cx, cy, a, b, grow: float = 1.0):
    m, d = P.mask()
    a, b = a * grow, b * grow
    if shape in ("oval", "round", "long"):
        d.ellipse(P.box(cx - a, cy - b, cx + a, cy + b), fill=255)
    elif shape == "square":
        d.rounded_rectangle(P.box(cx - a, cy - b, cx + a, cy + b), radius=0.55 * a * P.R, fill=255)
    else:  # heart: wide forehead/cheeks, narrow chin
        d.ellipse(P.box(cx - a, cy - b, cx + a, cy + 0.45 * b), fill=255)
        pts = [(cx - a, cy - 0.1 * b), (cx + a, cy - 0.1 * b), (cx + 0.55 * a, cy + 0.75 * b),
               (cx + 0.2 * a, cy + b), (cx - 0.2 * a, cy + b), (cx - 0.55 * a, cy + 0.75 * b)]
        d.polygon([P.p(x, y) for x, y in pts], fill=255)
    return m, d


def _hair_cap_mask(P: _Painter, idt, cx, cy, a, b, vol, y_cut, side_low=None, sweep=0.0):
    """Hair covering the top of the head above ``y_cut`` (sides may go down to ``side_low``)."""
    m, d = P.mask()
    d.ellipse(P.box(cx - a * vol, cy - b * (vol + 0.04), cx + a * vol, cy + b * vol), fill=255)
    # erase the face region below the hairline (optionally sloped for a side part)
    x0, x1 = cx - 0.82 * a, cx + 0.82 * a
    if side_low is None:
        d.rectangle(P.box(cx - 2 * a, y_cut, cx + 2 * a, cy + 2 * b), fill=0)
    else:
        d.rectangle(P.box(cx - 2 * a, side_low, cx + 2 * a, cy + 2 * b), fill=0)
        pts = [(x0, y_cut - sweep), (x1, y_cut + sweep), (x1, side_low + 0.01), (x0, side_low + 0.01)]
        d.polygon([P.p(x, y) for x, y in pts], fill=0)
    return m, d


@dataclasses.dataclass(frozen=True)
class _Look:
    """The per-image nuisance of one rendering, drawn from the image's RNG in a fixed order."""

    yaw: float
    smile: float
    mouth_open: bool
    openness: float
    brow_raise: float
    gaze: tuple[float, float]
    wear: dict[str, bool]
    hair_rgb: tuple[int, int, int]
    skin: tuple[int, int, int]
    cloth: tuple[int, int, int]
    cloth_kind: int
    hair_len: float


def _draw_look(ident: dict[str, Any], rng: np.random.RandomState, nz: float) -> _Look:
    """The first random draws of an image: pose, expression, accessories worn, colours."""
    yaw = _u(rng, -1, 1) * min(1.0, nz)
    smile = _u(rng, -0.35, 1.0)
    mouth_open = rng.rand() < 0.2 * min(1.0, nz)
    openness = _u(rng, 0.45, 1.0) if rng.rand() > 0.06 * nz else 0.12
    brow_raise = _u(rng, -0.04, 0.06) * nz
    gaze = (_u(rng, -0.3, 0.3) * nz, _u(rng, -0.15, 0.15) * nz)
    wear = {k: bool(rng.rand() < ACCESSORY_CONSISTENCY) for k in ("glasses", "earrings", "hat")}
    hair_rgb = _clip_rgb(np.array(ident["hair_rgb"]) * math.exp(_u(rng, -0.15, 0.15) * nz)
                         + rng.uniform(-10, 10, 3) * nz)
    skin = _clip_rgb(np.array(ident["skin"]) + rng.uniform(-12, 12, 3) * nz)
    cloth = _clip_rgb(rng.uniform(20, 235, 3))
    cloth_kind = _choice(rng, 2)
    hair_len = _u(rng, 0.9, 1.1)
    return _Look(yaw=yaw, smile=smile, mouth_open=mouth_open, openness=openness,
                 brow_raise=brow_raise, gaze=gaze, wear=wear, hair_rgb=hair_rgb, skin=skin,
                 cloth=cloth, cloth_kind=cloth_kind, hair_len=hair_len)


@dataclasses.dataclass(frozen=True)
class _Face:
    """Where the face and its features lie on the canvas (no random draws)."""

    a: float  # face half width
    b: float  # face half height
    cx: float
    cy: float
    fx: float  # centre of the inner features (shifted with yaw)
    y_hair: float
    mouth_y: float
    mouth_w: float
    lip_t: float
    eye_y: float
    eye_off: float
    eye_rx: float
    eye_ry_full: float
    eye_ry: float


def _face_geometry(ident: dict[str, Any], look: _Look) -> _Face:
    a = ident["face_half_width"]
    b = a * ident["face_aspect"]
    cx, cy = 0.5, 0.47
    rx = ident["eye_size"] * a
    ry_full = rx * EYE_ASPECT[ident["eye_shape"]]
    return _Face(a=a, b=b, cx=cx, cy=cy, fx=cx + 0.22 * a * look.yaw,
                 y_hair=cy - ident["hairline"] * b, mouth_y=cy + ident["mouth_pos"] * b,
                 mouth_w=ident["mouth_width"] * a, lip_t=ident["lip_thickness"] * a,
                 eye_y=cy - ident["eye_height"] * b, eye_off=ident["eye_spacing"] * a,
                 eye_rx=rx, eye_ry_full=ry_full, eye_ry=max(0.004, ry_full * look.openness))


def _paint_body_and_back_hair(P: _Painter, ident: dict[str, Any], look: _Look, f: _Face) -> None:
    a, b, cx, cy, skin, hc = f.a, f.b, f.cx, f.cy, look.skin, look.hair_rgb
    style, vol = ident["hair_style"], ident["hair_volume"]
    P.ellipse(cx, cy + b + 0.42, 2.3 * a, 0.4, look.cloth)
    if look.cloth_kind == 1:  # collar / v-neck
        P.polygon([(cx - 0.45 * a, cy + b + 0.02), (cx + 0.45 * a, cy + b + 0.02), (cx, cy + b + 0.16)], skin)
    P.polygon([(cx - 0.42 * a, cy + 0.4 * b), (cx + 0.42 * a, cy + 0.4 * b),
               (cx + 0.48 * a, cy + b + 0.06), (cx - 0.48 * a, cy + b + 0.06)], _scale(skin, 0.88))
    if style == "long":
        m, d = P.mask()
        d.rounded_rectangle(P.box(cx - 1.3 * a * vol, cy - b * 1.05, cx + 1.3 * a * vol,
                                  cy + b * (0.6 + 0.7 * look.hair_len)), radius=0.5 * a * P.R, fill=255)
        P.paste(hc, m)
    elif style == "afro":
        P.ellipse(cx, cy - 0.45 * b, 1.55 * a * vol, 1.1 * b * vol, hc)
    elif style == "bun":
        P.ellipse(cx, cy - 1.08 * b, 0.42 * a, 0.32 * a, hc)


def _paint_ears(P: _Painter, ident: dict[str, Any], look: _Look, f: _Face) -> None:
    a, b, cx, cy, yaw = f.a, f.b, f.cx, f.cy, look.yaw
    for s in (-1, 1):
        ew = 0.18 * a * (1 - 0.45 * s * yaw)
        ex = cx + s * (a * 0.97 - 0.05 * a * s * yaw)
        P.ellipse(ex, cy + 0.02 * b, ew, 0.27 * a, _scale(look.skin, 0.95), outline=_scale(look.skin, 0.8),
                  width=0.006)
        if ident["earrings"] is not None and look.wear["earrings"]:
            er = ident["earrings"]
            ey = cy + 0.02 * b + 0.3 * a
            if er["hoop"]:
                P.ellipse(ex, ey + 0.06 * a, 0.1 * a, 0.1 * a, None, outline=er["rgb"], width=0.012)
            else:
                P.ellipse(ex, ey, 0.055 * a, 0.055 * a, er["rgb"])


def _paint_face(P: _Painter, ident: dict[str, Any], look: _Look, f: _Face) -> None:
    a, b, cx, cy, fx, skin = f.a, f.b, f.cx, f.cy, f.fx, look.skin
    m, _ = _face_mask(P, ident["face_shape"], cx, cy, a, b)
    P.paste(_scale(skin, 0.8), _face_mask(P, ident["face_shape"], cx, cy, a, b, grow=1.015)[0])
    P.paste(skin, m)
    if ident["blush"]:
        for s in (-1, 1):
            P.ellipse(fx + s * 0.55 * a, cy + 0.22 * b, 0.2 * a, 0.11 * a, _mix(skin, (235, 110, 120), 0.35))
    if ident["freckles"]:
        for x, y in ident["freckles"]:
            P.ellipse(fx + x * a, cy + y * b, 0.025 * a, 0.025 * a, _scale(skin, 0.7))
    if ident["mole"] is not None:
        mx, my = ident["mole"]
        P.ellipse(fx + mx * a, cy + my * b, 0.035 * a, 0.035 * a, (70, 40, 30))


def _paint_beard(P: _Painter, ident: dict[str, Any], look: _Look, f: _Face) -> None:
    a, b, cx, cy, hc = f.a, f.b, f.cx, f.cy, look.hair_rgb
    beard = ident["beard"]
    if beard in ("full", "stubble"):
        bm, bd = _face_mask(P, ident["face_shape"], cx, cy, a, b, grow=1.02)
        bd.rectangle(P.box(cx - 2 * a, cy - 2 * b, cx + 2 * a, cy + 0.22 * b), fill=0)
        bd.ellipse(P.box(cx - 0.5 * a, cy + 0.18 * b, cx + 0.5 * a, cy + 0.36 * b), fill=0)
        P.paste(hc if beard == "full" else _mix(look.skin, hc, 0.45), bm)
    elif beard == "goatee":
        P.ellipse(f.fx, cy + 0.86 * b, 0.3 * a, 0.17 * b, hc)


def _paint_front_hair(P: _Painter, ident: dict[str, Any], look: _Look, f: _Face) -> None:
    a, b, cx, cy, y_hair, hc = f.a, f.b, f.cx, f.cy, f.y_hair, look.hair_rgb
    style, vol = ident["hair_style"], ident["hair_volume"]
    if style == "buzz":
        m, _ = _hair_cap_mask(P, ident, cx, cy, a, b, 1.02, y_hair)
        P.paste(_mix(look.skin, hc, 0.6), m)
    elif style in ("short", "long", "curly", "bun", "afro"):
        side_low = cy - 0.05 * b if style != "long" else cy + 0.2 * b
        m, _ = _hair_cap_mask(P, ident, cx, cy, a, b, vol if style != "bun" else 1.04, y_hair, side_low)
        P.paste(hc, m)
        if style == "curly":
            n = 13
            for i in range(n):
                t = math.pi * (1.05 + 0.9 * i / (n - 1))
                P.ellipse(cx + 1.02 * a * vol * math.cos(t), cy - 0.15 * b + 1.0 * b * vol * math.sin(t),
                          0.24 * a, 0.24 * a, hc)
    elif style == "fringe":
        m, _ = _hair_cap_mask(P, ident, cx, cy, a, b, vol, cy - 0.4 * b, side_low=cy + 0.05 * b)
        P.paste(hc, m)
    elif style == "side_part":
        s = ident["part_side"]
        m, d = _hair_cap_mask(P, ident, cx, cy, a, b, vol, y_hair - 0.05 * b, side_low=cy - 0.05 * b,
                              sweep=-s * 0.18 * b)
        P.paste(hc, m)
        P.line([(cx + s * 0.45 * a, cy - b * vol), (cx + s * 0.38 * a, y_hair - 0.05 * b - s * 0.0)],
               _scale(hc, 0.6), 0.012)


def _paint_hat(P: _Painter, ident: dict[str, Any], look: _Look, f: _Face) -> None:
    if ident["hat"] is None or not look.wear["hat"]:
        return
    a, b, cx, cy = f.a, f.b, f.cx, f.cy
    hcol = ident["hat"]["rgb"]
    m, d = P.mask()
    d.ellipse(P.box(cx - 1.12 * a, cy - 1.22 * b, cx + 1.12 * a, cy + 0.2 * b), fill=255)
    d.rectangle(P.box(cx - 2 * a, cy - 0.52 * b, cx + 2 * a, cy + 2 * b), fill=0)
    P.paste(hcol, m)
    if ident["hat"]["kind"] == "beanie":
        P.polygon([(cx - 1.13 * a, cy - 0.66 * b), (cx + 1.13 * a, cy - 0.66 * b),
                   (cx + 1.14 * a, cy - 0.5 * b), (cx - 1.14 * a, cy - 0.5 * b)], _scale(hcol, 0.75))
    else:
        P.ellipse(cx, cy - 0.52 * b, 1.35 * a, 0.1 * a, _scale(hcol, 0.8))


def _paint_eyes_and_brows(P: _Painter, ident: dict[str, Any], look: _Look, f: _Face) -> None:
    a, fx, yaw = f.a, f.fx, look.yaw
    ey, rx, ry = f.eye_y, f.eye_rx, f.eye_ry
    for s in (-1, 1):
        ex = fx + s * f.eye_off * (1 - 0.12 * s * yaw)
        P.ellipse(ex, ey, rx, ry, (245, 245, 240), outline=_scale(look.skin, 0.55), width=0.006)
        if look.openness > 0.2:
            ri = rx * 0.5
            ix, iy = ex + look.gaze[0] * rx, ey + look.gaze[1] * ry
            P.ellipse(ix, iy, ri, min(ri, ry * 0.95), ident["eye_rgb"])
            P.ellipse(ix, iy, ri * 0.45, min(ri * 0.45, ry * 0.6), (10, 10, 10))
        P.line([(ex - rx, ey), (ex - 0.5 * rx, ey - ry), (ex + 0.5 * rx, ey - ry), (ex + rx, ey)],
               (40, 28, 24), 0.008)
        # eyebrow
        by = ey - f.eye_ry_full - ident["brow_gap"] * a - look.brow_raise
        bt = ident["brow_thickness"] * a
        bl = rx * 1.25
        tilt = ident["brow_tilt"] * s
        brow_rgb = _scale(look.hair_rgb, 0.8) if ident["hair_style"] not in ("bald",) else (50, 40, 35)
        if ident["brow_shape"] == "straight":
            pts = [(ex - bl, by + tilt * bl), (ex + bl, by - tilt * bl)]
        elif ident["brow_shape"] == "arched":
            pts = [(ex - bl, by + 0.25 * bl), (ex - 0.4 * bl, by - 0.15 * bl), (ex + 0.4 * bl, by - 0.15 * bl),
                   (ex + bl, by + 0.25 * bl)]
        else:  # angled: peak towards the outer side
            pts = [(ex - s * bl, by + 0.15 * bl), (ex + s * 0.35 * bl, by - 0.25 * bl), (ex + s * bl, by + 0.1 * bl)]
        P.line(pts, brow_rgb, bt)


def _paint_glasses(P: _Painter, ident: dict[str, Any], look: _Look, f: _Face) -> None:
    gl = ident["glasses"]
    if gl is None or not look.wear["glasses"]:
        return
    a, fx, ey, ex_off = f.a, f.fx, f.eye_y, f.eye_off
    gr = f.eye_rx * 1.45
    gt = gl["thickness"] * a
    lens = (35, 35, 45) if gl["sun"] else None
    for s in (-1, 1):
        ex = fx + s * ex_off * (1 - 0.12 * s * look.yaw)
        bx = P.box(ex - gr, ey - 0.8 * gr, ex + gr, ey + 0.8 * gr)
        if gl["shape"] == "round":
            P.draw.ellipse(bx, fill=_rgba(lens), outline=_rgba(gl["rgb"]), width=P.w(gt))
        else:
            P.draw.rounded_rectangle(bx, radius=0.25 * gr * P.R, fill=_rgba(lens),
                                     outline=_rgba(gl["rgb"]), width=P.w(gt))
        P.line([(ex + s * gr, ey - 0.2 * gr), (f.cx + s * a * 0.98, ey - 0.1 * gr)], gl["rgb"], gt * 0.8)
    P.line([(fx - ex_off + gr, ey - 0.15 * gr), (fx + ex_off - gr, ey - 0.15 * gr)], gl["rgb"], gt)


def _paint_nose(P: _Painter, ident: dict[str, Any], look: _Look, f: _Face) -> None:
    skin = look.skin
    nx = f.fx + 0.1 * f.a * look.yaw
    ntop = f.eye_y + 0.05 * f.b
    L = ident["nose_length"] * f.b
    nw = ident["nose_width"] * f.a
    ns = ident["nose_shape"]
    dark = _scale(skin, 0.62)
    if ns == "triangle":
        P.polygon([(nx, ntop), (nx + nw / 2, ntop + L), (nx - nw / 2, ntop + L)], _scale(skin, 0.9), outline=dark)
    elif ns == "button":
        P.ellipse(nx, ntop + L - 0.2 * nw, 0.35 * nw, 0.25 * nw, _scale(skin, 0.88), outline=dark, width=0.005)
    elif ns == "long":
        P.line([(nx - 0.1 * nw, ntop), (nx - 0.1 * nw, ntop + L), (nx + 0.25 * nw, ntop + L)], dark, 0.008)
    else:  # wide
        P.ellipse(nx, ntop + L - 0.15 * nw, 0.55 * nw, 0.2 * nw, _scale(skin, 0.86), outline=dark, width=0.005)
    for s in (-1, 1):
        P.ellipse(nx + s * 0.22 * nw, ntop + L - 0.02 * f.b, 0.06 * nw, 0.045 * nw, (60, 35, 30))


def _paint_mouth(P: _Painter, ident: dict[str, Any], look: _Look, f: _Face) -> None:
    mw, lt = f.mouth_w, f.lip_t
    mx = f.fx + 0.06 * f.a * look.yaw
    k = 0.16 * mw * look.smile
    xs = np.linspace(-1, 1, 15)
    taper = np.sqrt(np.clip(1 - xs ** 2, 0, 1))
    yc = f.mouth_y + k * (0.5 - xs ** 2)
    gap = 0.35 * lt if look.mouth_open else 0.0
    upper = [(mx + 0.5 * mw * x, y - (0.55 * lt + 0.5 * gap) * t) for x, y, t in zip(xs, yc, taper)]
    lower = [(mx + 0.5 * mw * x, y + (0.6 * lt + 0.5 * gap) * t) for x, y, t in zip(xs, yc, taper)]
    P.polygon(upper + lower[::-1], ident["lip_rgb"])
    if look.mouth_open:
        inner_u = [(mx + 0.45 * mw * x, y - 0.5 * gap * t) for x, y, t in zip(xs, yc, taper)]
        inner_l = [(mx + 0.45 * mw * x, y + 0.5 * gap * t) for x, y, t in zip(xs, yc, taper)]
        P.polygon(inner_u + inner_l[::-1], (70, 20, 25))
    else:
        P.line([(mx + 0.5 * mw * x, y) for x, y in zip(xs, yc)], _scale(ident["lip_rgb"], 0.6), 0.005)
    if ident["moustache"]:
        mt = 0.1 * f.a
        top = [(mx + 0.55 * mw * x, y - 0.55 * lt - mt * (0.4 + 0.6 * t)) for x, y, t in zip(xs, yc, taper)]
        bot = [(mx + 0.55 * mw * x, y - 0.45 * lt) for x, y in zip(xs, yc)]
        P.polygon(top + bot[::-1], look.hair_rgb)


#: the drawing steps of a face, back to front
_PAINT_STEPS = (_paint_body_and_back_hair, _paint_ears, _paint_face, _paint_beard, _paint_front_hair,
                _paint_hat, _paint_eyes_and_brows, _paint_glasses, _paint_nose, _paint_mouth)


def render_face(ident: dict[str, Any], rng: np.random.RandomState, resolution: int = 64,
                nuisance: float = 1.0, rotation: bool = True) -> Image.Image:
    """Render one RGB image of ``ident`` with per-image nuisance drawn from ``rng``.

    The random draws happen in a fixed order (look, placement, background, occluder, camera),
    so an image is reproducible from its RNG; the painting steps draw nothing."""
    nz = float(nuisance)
    P = _Painter(_render_size(resolution))
    look = _draw_look(ident, rng, nz)
    face = _face_geometry(ident, look)
    for paint in _PAINT_STEPS:
        paint(P, ident, look, face)
    return photograph(P, rng, face, resolution, nz, rotation)


def render_identity_image(ident: dict[str, Any], image_index: int, *, seed: int = 0, resolution: int = 64,
                          nuisance: float = 1.0) -> Image.Image:
    """Image ``image_index`` of ``ident`` (deterministic in ``seed, pool, identity, image``)."""
    return render_face(ident, image_rng(seed, 2, ident, image_index), resolution=resolution,
                       nuisance=nuisance)


# ------------------------------------------------------------------------------------
# dataset generation
# ------------------------------------------------------------------------------------
def _domain_functions(domain: str):
    """(make the pool's classes, render image j of a class) of ``domain``."""
    if domain == "faces":
        return make_identities, render_identity_image
    if domain == "dogs":
        from atat.data import synthdogs

        return synthdogs.make_breeds, synthdogs.render_breed_image
    raise ValueError(f"unknown synthetic domain {domain!r}; use one of {list(DOMAINS)}")


def _write_pool(root: Path, pool: str, identities: list[dict[str, Any]], n_images: int, *, seed: int,
                split_seed: int, resolution: int, nuisance: float, progress: bool, params: dict,
                domain: str = "faces", n_extra_test: int = 0) -> dict:
    from atat.base.progress import track  # one log line per identity, with ETA

    render = _domain_functions(domain)[1]
    generator_name = "synthfaces" if domain == "faces" else f"synthfaces-{domain}"
    root.mkdir(parents=True)
    rows = []
    for label, ident in enumerate(track(identities, f"{generator_name} {pool}: classes done",
                                        enabled=progress)):
        d = root / "images" / ident["name"]
        d.mkdir(parents=True)
        for j in range(n_images + n_extra_test):
            img = render(ident, j, seed=seed, resolution=resolution, nuisance=nuisance)
            rel = f"images/{ident['name']}/{j:04d}.png"
            img.save(root / rel, format="PNG", optimize=False, compress_level=6)
            rows.append((rel, label, ident["name"], j >= n_images))
    df = pd.DataFrame(rows, columns=["path", "label", "identity", "extra"])
    if pool == "private":
        # the paper's splits over the first n_images of each class, exactly as without extras
        # (their positions in that sub-list); the extra images are test-only
        df["split"] = "test"
        base = df.index[~df["extra"]]
        for name, idx in split_indices(len(base), seed=split_seed).items():
            df.loc[base[idx], "split"] = name
    else:
        df["split"] = "public"
    df = df.drop(columns="extra")
    id_text = json.dumps(identities, indent=1, sort_keys=True) + "\n"
    (root / "identities.json").write_text(id_text)
    meta = {
        "name": f"{generator_name}_{pool}",
        "class_names": [i["name"] for i in identities],
        "resolution": [resolution, resolution],
        "split_seed": split_seed,
        "source": (f"synthfaces v{GENERATOR_VERSION}: procedurally rendered (atat.data.synthfaces"
                   + (")" if domain == "faces" else f", domain {domain})") + ", no downloads"),
        "pool": pool,
        "generator": {"name": "synthfaces", "version": GENERATOR_VERSION, **params},
        "identities_file": "identities.json",
        "image_order": "identity-major: label 0 images 0..K-1, label 1 images 0..K-1, ..."
                       + (f" (K = {n_images} + {n_extra_test}: images {n_images}.. of each class "
                          "are in the test split only)" if n_extra_test else ""),
    }
    return write_dataset(root, df, meta)


def generate_synthfaces(
    out_dir: str | os.PathLike[str],
    *,
    n_private_identities: int = DEFAULTS["n_private_identities"],
    n_public_identities: int = DEFAULTS["n_public_identities"],
    images_per_identity: int = DEFAULTS["images_per_identity"],
    public_images_per_identity: int = DEFAULTS["public_images_per_identity"],
    resolution: int = DEFAULTS["resolution"],
    seed: int = DEFAULTS["seed"],
    split_seed: int = DEFAULTS["split_seed"],
    nuisance: float = DEFAULTS["nuisance"],
    domain: str = "faces",
    extra_test_images_per_identity: int = 0,
    overwrite: bool = False,
    progress: bool = True,
) -> dict:
    """Render the synthfaces private and public pools into ``out_dir/private`` and ``out_dir/public``.

    ``domain``: ``faces`` (identities, this module) or ``dogs`` (breeds,
    :mod:`atat.data.synthdogs`); the ``*_identities`` counts are then counts of breeds.

    ``extra_test_images_per_identity``: further images of each private class (indices
    ``images_per_identity..``) that go to the test split only. The train/val/test split of the
    first ``images_per_identity`` images, and every image, are those of the dataset without
    them (an image depends only on its class and index), so models trained on either are the
    same; only the test split grows (a test accuracy's sampling error shrinks).

    Returns ``{"out_dir", "private": meta, "public": meta}``.  ``out_dir`` must not exist
    (or be empty) unless ``overwrite``; it is assembled in a temporary sibling directory
    and renamed into place only when complete.
    """
    out = Path(out_dir)
    for name, v in [("n_private_identities", n_private_identities), ("n_public_identities", n_public_identities),
                    ("images_per_identity", images_per_identity),
                    ("public_images_per_identity", public_images_per_identity)]:
        if int(v) < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if int(extra_test_images_per_identity) < 0:
        raise ValueError("extra_test_images_per_identity must be >= 0, got "
                         f"{extra_test_images_per_identity}")
    if int(resolution) < 8:
        raise ValueError(f"resolution must be >= 8, got {resolution}")
    make_classes = _domain_functions(domain)[0]
    if out.exists() and not (out.is_dir() and not any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty (pass overwrite=True)")
    params = {
        "n_private_identities": int(n_private_identities),
        "n_public_identities": int(n_public_identities),
        "images_per_identity": int(images_per_identity),
        "public_images_per_identity": int(public_images_per_identity),
        "resolution": int(resolution),
        "seed": int(seed),
        "split_seed": int(split_seed),
        "nuisance": float(nuisance),
    }
    if domain != "faces":  # faces' meta stays as before (its datasets' files unchanged)
        params["domain"] = domain
    if int(extra_test_images_per_identity):  # likewise: absent when 0
        params["extra_test_images_per_identity"] = int(extra_test_images_per_identity)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        metas = {}
        for pool, n_id, n_img in (("private", n_private_identities, images_per_identity),
                                  ("public", n_public_identities, public_images_per_identity)):
            ids = make_classes(int(n_id), pool, seed)
            metas[pool] = _write_pool(tmp / pool, pool, ids, int(n_img), seed=int(seed), split_seed=int(split_seed),
                                      resolution=int(resolution), nuisance=float(nuisance), progress=progress,
                                      params=params, domain=domain,
                                      n_extra_test=int(extra_test_images_per_identity) if pool == "private" else 0)
        install_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"out_dir": str(out), "private": metas["private"], "public": metas["public"]}


def contact_sheet(root: str | os.PathLike[str], n_identities: int = 10, n_images: int = 8, scale: int = 1) -> Image.Image:
    """Grid of the first ``n_images`` images of the first ``n_identities`` classes (for inspection)."""
    from atat.data.manifest import read_dataset

    df, meta = read_dataset(root)
    rows = []
    for label in range(min(n_identities, meta["n_classes"])):
        paths = df[df["label"] == label]["path"].tolist()[:n_images]
        rows.append([Image.open(Path(root) / p).convert("RGB") for p in paths])
    h, w = rows[0][0].height, rows[0][0].width
    sheet = Image.new("RGB", (n_images * w, len(rows) * h), (255, 255, 255))
    for r, imgs in enumerate(rows):
        for c, im in enumerate(imgs):
            sheet.paste(im, (c * w, r * h))
    if scale != 1:
        sheet = sheet.resize((sheet.width * scale, sheet.height * scale), Image.Resampling.NEAREST)
    return sheet


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m atat.data.synthfaces", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (gets private/ and public/)")
    ap.add_argument("--n-private", type=int, default=DEFAULTS["n_private_identities"])
    ap.add_argument("--n-public", type=int, default=DEFAULTS["n_public_identities"])
    ap.add_argument("--images-per-identity", type=int, default=DEFAULTS["images_per_identity"])
    ap.add_argument("--public-images-per-identity", type=int, default=DEFAULTS["public_images_per_identity"])
    ap.add_argument("--resolution", type=int, default=DEFAULTS["resolution"])
    ap.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    ap.add_argument("--split-seed", type=int, default=DEFAULTS["split_seed"])
    ap.add_argument("--nuisance", type=float, default=DEFAULTS["nuisance"])
    ap.add_argument("--domain", choices=DOMAINS, default="faces")
    ap.add_argument("--extra-test-images-per-identity", type=int, default=0,
                    help="further images per private class, in the test split only")
    ap.add_argument("--overwrite", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--sheet", help="also write a contact sheet PNG of the private pool here")
    args = ap.parse_args(argv)
    res = generate_synthfaces(
        args.out, n_private_identities=args.n_private, n_public_identities=args.n_public,
        images_per_identity=args.images_per_identity, public_images_per_identity=args.public_images_per_identity,
        resolution=args.resolution, seed=args.seed, split_seed=args.split_seed, nuisance=args.nuisance,
        domain=args.domain, extra_test_images_per_identity=args.extra_test_images_per_identity,
        overwrite=args.overwrite, progress=not args.no_progress,
    )
    if args.sheet:
        contact_sheet(Path(args.out) / "private", scale=max(1, 128 // args.resolution)).save(args.sheet)
    print(json.dumps({"out_dir": res["out_dir"], "private": res["private"]["counts"],
                      "public": res["public"]["counts"]}))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
