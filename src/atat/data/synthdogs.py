"""``synthdogs``: a procedurally rendered synthetic *dog-breed* population (Stanford Dogs stand-in).

Like :mod:`atat.data.synthfaces`, nothing is downloaded or pretrained: every image is drawn
with PIL and NumPy from a seed, so the same arguments give byte-identical images.  The
background, placement, occluder and camera nuisance are the faces module's own helpers.

Breeds
    A class is a *breed*, not an individual: a fixed set of defining traits shared by many
    individual dogs.  Discrete traits: head shape (round, long, broad, wedge), ear type
    (pointed, bat, floppy, button, rose), coat pattern (solid, tan points, dark mask, white
    blaze, piebald patches, spots, saddle, brindle), coat texture (smooth, wiry with brow
    tufts and a beard, fluffy with a ragged outline and a ruff), nose colour, eye colour,
    base and secondary coat colour (from a dog palette: black, white, cream, tan, red,
    chocolate, blue/grey, golden, sable).  Continuous traits: head size and aspect, muzzle
    length and width, ear size and spread, eye size / spacing / height, the breed's piebald
    patch layout and spot count, brindle stripe angle.  Within a pool, breeds are drawn one
    after the other and a candidate that differs from an earlier breed of the pool in fewer
    than ``MIN_DISCRETE_DIFF`` discrete traits is rejected and redrawn.

Nuisance (per image, scaled by ``nuisance``)
    the individual dog (coat colours jittered more than a face's skin, head size, muzzle and
    ear proportions, pattern placement, spot positions), pose and expression (head yaw with
    shifted inner features, ear angle, open mouth with tongue, eye openness), an optional
    collar of a random colour (not a breed trait), then the faces' shared nuisance: affine
    placement (scale, in-plane tilt, shift), background, occluder and camera (lighting,
    tint, blur, pixel noise).

Pools are the faces' ``POOLS`` (``private`` -> ``priv_XXXX``, ``public`` -> ``pub_XXXX``);
the RNG streams are keyed differently from the faces' (11: breeds, 12: images), so a dog
population is independent of a face population of the same seed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from PIL import Image, ImageChops

from atat.data.painting import (
    _choice, _clip_rgb, _mix, _Painter, _render_size, _scale, _u, draw_distinct_pool,
    image_rng, photograph,
)

Pt = tuple[float, float]
DOG_COLOURS = [
    ("black", (34, 30, 30)), ("white", (238, 234, 226)), ("cream", (232, 212, 170)),
    ("tan", (196, 148, 94)), ("red", (168, 80, 38)), ("chocolate", (94, 58, 38)),
    ("blue", (118, 126, 138)), ("golden", (214, 160, 72)), ("sable", (132, 96, 60)),
]
HEAD_SHAPES = ["round", "long", "broad", "wedge"]
HEAD_ASPECT = {"round": (1.0, 1.08), "long": (1.22, 1.34), "broad": (0.86, 0.94), "wedge": (1.06, 1.16)}
MUZZLE_LENGTH = {"round": (0.3, 0.45), "long": (0.6, 0.8), "broad": (0.3, 0.42), "wedge": (0.5, 0.68)}
EAR_TYPES = ["pointed", "bat", "floppy", "button", "rose"]
PATTERNS = ["solid", "tan_points", "mask", "blaze", "piebald", "spots", "saddle", "brindle"]
TEXTURES = ["smooth", "wiry", "fluffy"]
NOSE_COLOURS = [("black", (22, 18, 18)), ("liver", (110, 60, 46)), ("pink", (204, 134, 130))]
DOG_EYES = [("dark", (30, 20, 16)), ("brown", (96, 56, 24)), ("amber", (188, 120, 40)), ("blue", (96, 146, 204))]
_DISCRETE_KEYS = ("head_shape", "ear_type", "pattern", "texture", "nose_colour", "eye_colour",
                  "base_colour", "second_colour")
N_SPOTS_MAX = 14


def _draw_breed(rng: np.random.RandomState) -> dict[str, Any]:
    shape = HEAD_SHAPES[_choice(rng, len(HEAD_SHAPES))]
    base_i = _choice(rng, len(DOG_COLOURS))
    second_i = (base_i + 1 + _choice(rng, len(DOG_COLOURS) - 1)) % len(DOG_COLOURS)  # != base
    nose_i = _choice(rng, len(NOSE_COLOURS), np.array([6.0, 2.0, 1.0]))
    eye_i = _choice(rng, len(DOG_EYES), np.array([5.0, 4.0, 2.0, 1.0]))
    return {
        "head_shape": shape,
        "head_half_width": _u(rng, 0.18, 0.22),
        "head_aspect": _u(rng, *HEAD_ASPECT[shape]),
        "muzzle_length": _u(rng, *MUZZLE_LENGTH[shape]),  # muzzle half-height / a
        "muzzle_width": _u(rng, 0.38, 0.62),  # muzzle half-width / a
        "ear_type": EAR_TYPES[_choice(rng, len(EAR_TYPES))],
        "ear_size": _u(rng, 0.8, 1.25),
        "ear_spread": _u(rng, 0.5, 0.8),  # ear base offset / a
        "eye_size": _u(rng, 0.1, 0.16),  # / a
        "eye_spacing": _u(rng, 0.32, 0.5),  # / a
        "eye_height": _u(rng, 0.05, 0.25),  # above centre, / b
        "pattern": PATTERNS[_choice(rng, len(PATTERNS))],
        "texture": TEXTURES[_choice(rng, len(TEXTURES), np.array([5.0, 2.0, 2.0]))],
        "nose_colour": NOSE_COLOURS[nose_i][0], "nose_rgb": NOSE_COLOURS[nose_i][1],
        "eye_colour": DOG_EYES[eye_i][0], "eye_rgb": DOG_EYES[eye_i][1],
        "base_colour": DOG_COLOURS[base_i][0],
        "base_rgb": _clip_rgb(np.array(DOG_COLOURS[base_i][1]) + rng.uniform(-12, 12, 3)),
        "second_colour": DOG_COLOURS[second_i][0],
        "second_rgb": _clip_rgb(np.array(DOG_COLOURS[second_i][1]) + rng.uniform(-12, 12, 3)),
        # piebald patches (x/a, y/b, r/a) and spot count / stripe angle: drawn for every breed
        "patches": [[_u(rng, -0.8, 0.8), _u(rng, -0.8, 0.4), _u(rng, 0.3, 0.6)] for _ in range(3)],
        "n_spots": int(rng.randint(6, N_SPOTS_MAX + 1)),
        "stripe_angle": _u(rng, -0.5, 0.5),
    }


def _signature(breed: dict[str, Any]) -> tuple:
    return tuple(breed[k] for k in _DISCRETE_KEYS)


def make_breeds(n: int, pool: str, seed: int = 0) -> list[dict[str, Any]]:
    """The first ``n`` breeds of ``pool`` (``private``/``public``) for ``seed`` (RNG stream 11;
    the faces' identities use 1)."""
    return draw_distinct_pool(n, pool, seed, 11, _draw_breed, _signature, "breed")


# ------------------------------------------------------------------------------------
# rendering
# ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Dog:
    """One rendering: the individual + pose (drawn from the image RNG) and the head geometry."""

    cx: float  # head centre (what _place_layer rotates/scales about)
    cy: float
    a: float  # head half width
    b: float  # head half height
    fx: float  # centre of the inner features (shifted with yaw)
    yaw: float
    base: tuple[int, int, int]
    second: tuple[int, int, int]
    ear_angle: float  # radians, outward
    ear_scale: float
    mz_rx: float
    mz_ry: float
    mouth_open: bool
    openness: float
    shift: Pt  # pattern placement jitter (/a)
    spots: list[tuple[float, float, float]]
    stripe_phase: float
    collar: tuple[int, int, int] | None


def _draw_dog(breed: dict[str, Any], rng: np.random.RandomState, nz: float) -> _Dog:
    """All per-image draws before placement, in a fixed order."""
    n1 = min(1.0, nz)

    def coat(rgb) -> tuple[int, int, int]:  # an individual's coat: brightness + per-channel jitter
        return _clip_rgb(np.array(rgb) * math.exp(_u(rng, -0.2, 0.2) * nz) + rng.uniform(-18, 18, 3) * nz)

    base, second = coat(breed["base_rgb"]), coat(breed["second_rgb"])
    a = breed["head_half_width"] * math.exp(_u(rng, -0.07, 0.07) * nz)
    b = a * breed["head_aspect"] * math.exp(_u(rng, -0.05, 0.05) * nz)
    yaw = _u(rng, -1, 1) * n1
    ear_angle = math.radians(_u(rng, -14, 14) * nz)
    ear_scale = math.exp(_u(rng, -0.12, 0.12) * nz)
    mz_rx = breed["muzzle_width"] * a * math.exp(_u(rng, -0.1, 0.1) * nz)
    mz_ry = breed["muzzle_length"] * a * math.exp(_u(rng, -0.1, 0.1) * nz)
    mouth_open = bool(rng.rand() < 0.35 * n1)
    openness = _u(rng, 0.55, 1.0) if rng.rand() > 0.06 * nz else 0.15
    shift = (_u(rng, -0.15, 0.15) * nz, _u(rng, -0.15, 0.15) * nz)
    spots = [(_u(rng, -0.85, 0.85), _u(rng, -0.85, 0.7), _u(rng, 0.06, 0.13)) for _ in range(N_SPOTS_MAX)]
    stripe_phase = _u(rng, 0, 1)
    collar_rgb = _clip_rgb(rng.uniform(20, 235, 3))
    collar = collar_rgb if rng.rand() < 0.45 else None
    cx, cy = 0.5, 0.42
    return _Dog(cx=cx, cy=cy, a=a, b=b, fx=cx + 0.2 * a * yaw, yaw=yaw, base=base, second=second,
                ear_angle=ear_angle, ear_scale=ear_scale, mz_rx=mz_rx, mz_ry=mz_ry, mouth_open=mouth_open,
                openness=openness, shift=shift, spots=spots, stripe_phase=stripe_phase, collar=collar)


def _head_mask(P: _Painter, shape: str, d: _Dog, grow: float = 1.0) -> Image.Image:
    m, dr = P.mask()
    a, b, cx, cy = d.a * grow, d.b * grow, d.cx, d.cy
    if shape == "broad":
        dr.rounded_rectangle(P.box(cx - a, cy - b, cx + a, cy + b), radius=0.7 * a * P.R, fill=255)
    elif shape == "wedge":  # broad skull tapering to the muzzle
        dr.ellipse(P.box(cx - a, cy - b, cx + a, cy + 0.5 * b), fill=255)
        pts = [(cx - a, cy - 0.1 * b), (cx + a, cy - 0.1 * b), (cx + 0.42 * a, cy + b), (cx - 0.42 * a, cy + b)]
        dr.polygon([P.p(x, y) for x, y in pts], fill=255)
    else:  # round / long (aspect does the rest)
        dr.ellipse(P.box(cx - a, cy - b, cx + a, cy + b), fill=255)
    return m


def _ear(d: _Dog, s: int, base: Pt, local: list[Pt], tilt: float) -> list[Pt]:
    """Ear polygon: ``local`` points (x outward, y down, units of a), rotated outward by
    ``tilt`` + the image's ear angle about the ear base, mirrored for side ``s``."""
    ang = tilt + d.ear_angle  # mirrored by s below: the same outward sense on both sides
    c, sn = math.cos(ang), math.sin(ang)
    k = d.a * d.ear_scale
    out = []
    for x, y in local:
        xr, yr = c * x - sn * y, sn * x + c * y
        out.append((base[0] + s * k * xr, base[1] + k * yr))
    return out


def _paint_ears(P: _Painter, breed: dict[str, Any], d: _Dog, front: bool) -> None:
    et, size = breed["ear_type"], breed["ear_size"]
    if (et in ("floppy", "button")) != front:
        return
    col = d.second if breed["pattern"] in ("saddle", "piebald", "mask") else _scale(d.base, 0.72)
    inner = _mix(col, (214, 150, 150), 0.45)
    for s in (-1, 1):
        bx = d.cx + s * breed["ear_spread"] * d.a * (1 - 0.25 * s * d.yaw)
        by = d.cy - 0.7 * d.b
        if et in ("pointed", "bat"):
            w, h, tilt = (0.3, 0.95, 0.25) if et == "pointed" else (0.45, 1.05, 0.6)
            P.polygon(_ear(d, s, (bx, by), [(-w, 0.2), (0.0, -h * size), (w, 0.2)], tilt), col)
            P.polygon(_ear(d, s, (bx, by), [(-0.5 * w, 0.1), (0.0, -0.7 * h * size), (0.5 * w, 0.1)], tilt), inner)
        elif et == "rose":  # small ear folded back, pointing sideways
            P.polygon(_ear(d, s, (bx, by + 0.1 * d.b), [(-0.2, 0.2), (0.55 * size, -0.35), (0.6 * size, 0.1),
                                                        (0.2, 0.3)], 0.3), _scale(col, 0.85))
        elif et == "floppy":  # long hanging ear over the side of the head
            L = 1.5 * size
            pts = [(-0.25, -0.1), (0.3, -0.15), (0.5, 0.5 * L), (0.35, L), (0.05, 1.05 * L), (-0.2, 0.6 * L)]
            P.polygon(_ear(d, s, (bx + s * (0.95 - breed["ear_spread"]) * d.a, by), pts, 0.2), col)
        else:  # button: a flap folded forward at the top of the skull
            P.polygon(_ear(d, s, (bx, by - 0.05 * d.b), [(-0.3, -0.15), (0.35 * size, -0.25), (0.3 * size, 0.15),
                                                          (-0.05, 0.4 * size)], 0.2), col)


def _paint_body(P: _Painter, breed: dict[str, Any], d: _Dog) -> None:
    a, b, cx, cy = d.a, d.b, d.cx, d.cy
    body = _scale(d.base, 0.9)
    P.polygon([(cx - 0.6 * a, cy + 0.3 * b), (cx + 0.6 * a, cy + 0.3 * b), (cx + 0.9 * a, cy + b + 0.2),
               (cx - 0.9 * a, cy + b + 0.2)], body)
    P.ellipse(cx, cy + b + 0.36, 1.6 * a, 0.26, body)
    if breed["pattern"] in ("tan_points", "blaze", "piebald"):  # chest patch
        P.ellipse(cx, cy + b + 0.22, 0.5 * a, 0.14, d.second)
    if breed["texture"] == "fluffy":  # ruff under the head
        for i in range(11):
            t = math.pi * (0.1 + 0.8 * i / 10)
            P.ellipse(cx + 1.05 * a * math.cos(t), cy + 0.55 * b + 0.6 * b * math.sin(t), 0.25 * a, 0.25 * a, body)
    if d.collar is not None:
        y = cy + b + 0.03
        P.polygon([(cx - 1.0 * a, y), (cx + 1.0 * a, y), (cx + 1.05 * a, y + 0.045), (cx - 1.05 * a, y + 0.045)],
                  d.collar)


def _paint_head(P: _Painter, breed: dict[str, Any], d: _Dog) -> Image.Image:
    """Head silhouette, fur texture and coat pattern; returns the head mask."""
    a, b, cx, cy = d.a, d.b, d.cx, d.cy
    if breed["texture"] == "fluffy":  # ragged outline: tufts around the perimeter
        for i in range(18):
            t = 2 * math.pi * i / 18
            P.ellipse(cx + 0.98 * a * math.cos(t), cy + 0.95 * b * math.sin(t), 0.17 * a, 0.17 * a, d.base)
    head = _head_mask(P, breed["head_shape"], d)
    P.paste(_scale(d.base, 0.75), _head_mask(P, breed["head_shape"], d, grow=1.03))  # outline
    P.paste(d.base, head)
    pat, sx, sy = breed["pattern"], d.shift[0] * a, d.shift[1] * a
    m, dr = P.mask()
    if pat == "piebald":
        for x, y, r in breed["patches"]:
            dr.ellipse(P.box(cx + x * a + sx - r * a, cy + y * b + sy - r * a, cx + x * a + sx + r * a,
                             cy + y * b + sy + r * a), fill=255)
    elif pat == "spots":
        for x, y, r in d.spots[: breed["n_spots"]]:
            dr.ellipse(P.box(cx + x * a - r * a, cy + y * b - r * a, cx + x * a + r * a, cy + y * b + r * a), fill=255)
    elif pat == "saddle":  # cap over the skull down to the eyes
        y = cy - breed["eye_height"] * b + sy
        dr.ellipse(P.box(cx - 1.2 * a, cy - 1.3 * b, cx + 1.2 * a, y + 0.1 * b), fill=255)
    elif pat == "brindle":  # thin dark stripes at the breed's angle
        ang = breed["stripe_angle"]
        for i in range(-6, 7):
            x0 = cx + (i + d.stripe_phase) * 0.3 * a
            dr.line([P.p(x0 - 1.5 * b * math.sin(ang), cy - 1.5 * b), P.p(x0 + 1.5 * b * math.sin(ang), cy + 1.5 * b)],
                    fill=255, width=P.w(0.07 * a))
    elif pat == "blaze":  # white strip down the middle of the face
        w = 0.18 * a * (1 + d.shift[0])
        pts = [(d.fx - 0.5 * w, cy - b), (d.fx + 0.5 * w, cy - b), (d.fx + 1.6 * w, cy + 0.3 * b),
               (d.fx - 1.6 * w, cy + 0.3 * b)]
        dr.polygon([P.p(x, y) for x, y in pts], fill=255)
    elif pat == "mask":  # dark mask around the eyes
        ey = cy - breed["eye_height"] * b
        rr = (breed["eye_size"] * 2.0 + 0.08 + 0.3 * abs(d.shift[1])) * a
        for s in (-1, 1):
            ex = d.fx + s * breed["eye_spacing"] * a
            dr.ellipse(P.box(ex - rr, ey - rr, ex + rr, ey + rr), fill=255)
        w = breed["eye_spacing"] * a  # joined over the bridge of the nose down to the muzzle
        dr.ellipse(P.box(d.fx - w, ey, d.fx + w, cy + b), fill=255)
    P.paste(_mix(d.second, (10, 8, 8), 0.5) if pat == "mask" else d.second, ImageChops.multiply(head, m))
    return head


def _paint_face(P: _Painter, breed: dict[str, Any], d: _Dog) -> None:
    """Eyes, brows/tufts, muzzle, nose and mouth (features shift with yaw)."""
    a, b, cy, pat = d.a, d.b, d.cy, breed["pattern"]
    ey = cy - breed["eye_height"] * b
    er = breed["eye_size"] * a
    for s in (-1, 1):
        ex = d.fx + s * breed["eye_spacing"] * a * (1 - 0.15 * s * d.yaw)
        if pat == "tan_points":  # tan eyebrow dots
            P.ellipse(ex, ey - 2.0 * er, 0.9 * er, 0.6 * er, d.second)
        if breed["texture"] == "wiry":  # bushy brow tufts
            tuft = [(ex - 1.4 * er, ey - 1.3 * er), (ex + 1.4 * er, ey - 1.6 * er), (ex + s * 1.8 * er, ey - 0.5 * er)]
            P.polygon(tuft, _mix(d.base, (230, 226, 218), 0.3))
        ry = er * 0.9 * d.openness
        P.ellipse(ex, ey, er * 1.1, ry * 1.1 + 0.004, (18, 14, 12))
        if d.openness > 0.3:
            P.ellipse(ex, ey, er * 0.85, ry * 0.85, breed["eye_rgb"])
            P.ellipse(ex, ey, er * 0.45, ry * 0.5, (8, 6, 6))
            P.ellipse(ex - 0.3 * er, ey - 0.3 * ry, 0.18 * er, 0.18 * er, (240, 240, 236))
    # muzzle: protrudes, so it shifts further with yaw than the eyes
    mx, mrx, mry = d.cx + 0.35 * a * d.yaw, d.mz_rx, d.mz_ry
    my = cy + 0.15 * b + mry
    mcol = {"tan_points": d.second, "mask": _mix(d.second, (10, 8, 8), 0.5), "blaze": d.second}.get(
        pat, _mix(d.base, (240, 236, 228), 0.18))  # plain coats: a slightly lighter muzzle
    if breed["texture"] == "wiry":  # beard below the muzzle
        pts = [(mx - 0.9 * mrx, my)] + [(mx + (-0.8 + 0.16 * i) * mrx, my + mry * (1.5 if i % 2 else 1.1))
                                        for i in range(11)] + [(mx + 0.9 * mrx, my)]
        P.polygon(pts, _mix(mcol, (225, 220, 210), 0.35))
    bridge_top = ey + 0.3 * er
    P.ellipse(0.5 * (d.fx + mx), 0.5 * (bridge_top + my), 0.5 * mrx, 0.5 * (my - bridge_top),
              _mix(mcol, d.base, 0.4))  # bridge of the nose, from between the eyes down
    P.ellipse(mx, my, mrx, mry, mcol)
    # mouth, then nose on top
    nx, ny, nw = d.cx + 0.42 * a * d.yaw, my - 0.25 * mry, 0.42 * mrx
    line = (30, 22, 20)
    if d.mouth_open:
        P.ellipse(mx, my + 0.6 * mry, 0.55 * mrx, 0.35 * mry, (60, 22, 26))
        P.ellipse(mx, my + 0.95 * mry, 0.32 * mrx, 0.45 * mry, (226, 104, 120))  # tongue
    P.line([(nx, ny), (nx, my + 0.45 * mry)], line, 0.006)
    for s in (-1, 1):
        P.line([(nx, my + 0.45 * mry), (nx + s * 0.3 * mrx, my + 0.6 * mry), (nx + s * 0.6 * mrx, my + 0.45 * mry)],
               line, 0.006)
    P.polygon([(nx - nw, ny - 0.55 * nw), (nx + nw, ny - 0.55 * nw), (nx + 0.7 * nw, ny + 0.2 * nw),
               (nx, ny + 0.55 * nw), (nx - 0.7 * nw, ny + 0.2 * nw)], breed["nose_rgb"])
    P.ellipse(nx - 0.25 * nw, ny - 0.25 * nw, 0.2 * nw, 0.12 * nw, _mix(breed["nose_rgb"], (255, 255, 255), 0.4))


def render_dog(breed: dict[str, Any], rng: np.random.RandomState, resolution: int = 64,
               nuisance: float = 1.0) -> Image.Image:
    """Render one RGB image of ``breed`` with per-image nuisance drawn from ``rng``.

    Random draws happen in a fixed order (individual + pose, placement, background,
    occluder, camera), so an image is reproducible from its RNG; painting draws nothing."""
    nz = float(nuisance)
    P = _Painter(_render_size(resolution))
    d = _draw_dog(breed, rng, nz)
    _paint_body(P, breed, d)
    _paint_ears(P, breed, d, front=False)
    _paint_head(P, breed, d)
    _paint_face(P, breed, d)
    _paint_ears(P, breed, d, front=True)
    return photograph(P, rng, d, resolution, nz)


def render_breed_image(breed: dict[str, Any], image_index: int, *, seed: int = 0, resolution: int = 64,
                       nuisance: float = 1.0) -> Image.Image:
    """Image ``image_index`` of ``breed`` (deterministic in ``seed, pool, breed, image``)."""
    return render_dog(breed, image_rng(seed, 12, breed, image_index), resolution=resolution,
                      nuisance=nuisance)
