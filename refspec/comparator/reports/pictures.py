"""The pictures of the HTML report, drawn from the NumPy arrays with the standard library alone:
the error heat map (a PNG of the map, nearest-neighbour enlarged, inside an SVG with the marks
of the failing cells, integer ticks, the axis names and a colour bar) and the ulp histogram (SVG
bars) (docs/compare.md, "Reports")."""

from __future__ import annotations

import base64
import html
import math
import struct
import zlib

import numpy as np

__all__ = ["png", "heatmap_svg", "histogram_svg", "pool", "integer_ticks"]

#: the blues of cells within the rule, from error / allowed = 1e-3 (light) to 1 (dark)
BLUES = ((247, 251, 255), (222, 235, 247), (198, 219, 239), (158, 202, 225), (107, 174, 214),
         (66, 146, 198), (33, 113, 181), (8, 81, 156), (8, 48, 107))
RED = (224, 0, 0)
#: failing cells are marked when there are at most this many
RING_LIMIT = 50
#: cells at least this many pixels each way are marked inside themselves (an ellipse
#: ``MARK_INSET`` pixels in from their edges); smaller ones by a ring around them of at least
#: ``MARK_RADIUS`` pixels
MARK_CELL, MARK_INSET, MARK_RADIUS, MARK_STROKE = 12, 3, 8, 2
#: the largest plot area of the heat map, pixels
PLOT_W, PLOT_H = 480, 320


def png(rgb: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of an (height, width, 3) uint8 array."""
    h, w, _ = rgb.shape
    rows = np.concatenate([np.zeros((h, 1), np.uint8), rgb.reshape(h, 3 * w)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + chunk(b"IEND", b""))


def pool(a: np.ndarray, limit: int = 256) -> tuple[np.ndarray, int, int]:
    """Max-pool a 2-D map down to at most limit x limit cells; (map, row factor, column
    factor)."""
    fr = max(1, math.ceil(a.shape[0] / limit))
    fc = max(1, math.ceil(a.shape[1] / limit))
    if fr == 1 and fc == 1:
        return a, 1, 1
    rows = math.ceil(a.shape[0] / fr) * fr
    cols = math.ceil(a.shape[1] / fc) * fc
    pad = np.zeros((rows, cols))
    pad[: a.shape[0], : a.shape[1]] = a
    return pad.reshape(rows // fr, fr, cols // fc, fc).max(axis=(1, 3)), fr, fc


def integer_ticks(n: int, most: int = 8) -> list[int]:
    """Indices 0, k, 2k, ... below ``n``, k the first of 1, 2, 5, 10, 20, 50, ... that makes at
    most ``most`` of them."""
    step, k = 1, 0
    while math.ceil(n / step) > most:
        k += 1
        step = (1, 2, 5)[k % 3] * 10 ** (k // 3)
    return list(range(0, max(n, 1), step))


def _colours(a: np.ndarray) -> np.ndarray:
    """(rows, cols, 3) uint8: blues by log10 of error / allowed in [1e-3, 1], red above 1."""
    with np.errstate(divide="ignore"):
        t = (np.log10(np.clip(a, 1e-3, 1.0)) + 3.0) / 3.0
    pos = t * (len(BLUES) - 1)
    stops = np.arange(len(BLUES))
    rgb = np.stack([np.interp(pos, stops, [c[k] for c in BLUES]) for k in range(3)], axis=-1)
    rgb[a > 1.0] = RED
    return np.rint(rgb).astype(np.uint8)


def _text_width(text: str, size: float) -> float:
    """A generous estimate of the width of ``text`` in a sans-serif font of ``size`` px (wide
    fonts such as DejaVu Sans average about 0.6 em a character)."""
    return 0.65 * size * len(text)


def _centred(text: str, size: float, centre: float, width: float) -> tuple[float, float]:
    """(x, picture width): ``text`` centred at ``centre`` unless that would cut it at the left
    edge (then moved right), the picture widened until it holds the text's right end."""
    half = _text_width(text, size) / 2 + 4
    x = max(centre, half)
    return x, max(width, math.ceil(x + half))


def _marks(ys, xs, sy: int, sx: int, left: int, top: int) -> list[str]:
    """The marks of the failing cells (rows ``ys``, columns ``xs``) of cells ``sy`` x ``sx``
    pixels at (``left``, ``top``): an ellipse inside each cell when the cells are large enough
    to hold one (``MARK_CELL``), so it covers no neighbour; else a red ring around the cell,
    large enough to be seen (``MARK_RADIUS``)."""
    out = []
    for y, x in zip(ys.tolist(), xs.tolist()):
        cx, cy = left + (x + 0.5) * sx, top + (y + 0.5) * sy
        if min(sx, sy) >= MARK_CELL:
            rx, ry, colour = sx / 2 - MARK_INSET, sy / 2 - MARK_INSET, "#fff"
        else:
            rx = ry = max(MARK_RADIUS, math.hypot(sx, sy) / 2 + 3)
            colour = f"rgb{RED}"
        out.append(f"<ellipse class='mark' data-row='{y}' data-col='{x}' cx='{cx:.1f}' "
                   f"cy='{cy:.1f}' rx='{rx:.1f}' ry='{ry:.1f}' fill='none' stroke='{colour}' "
                   f"stroke-width='{MARK_STROKE}'/>")
    return out


def _text(x, y, text, anchor="middle", size=11, extra="") -> str:
    return (f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}'{extra}>"
            f"{html.escape(str(text))}</text>")


def heatmap_svg(heat: np.ndarray, title: str, ylabel: str, xlabel: str, uid: str = "") -> str:
    """The error map of ``heat`` (rows x columns of the worst error / allowed per cell): cells
    within the rule in blues, failing cells red and, when at most ``RING_LIMIT``, marked
    (``_marks``: inside a cell large enough, else ringed so one failing element stands out in a
    large map); integer ticks on both axes; the title whole, however long. ``uid`` tells the
    colour bar's gradient apart from other pictures' on the page."""
    a, fr, fc = pool(np.minimum(heat, 1e6))
    rows, cols = a.shape
    sy, sx = max(1, PLOT_H // rows), max(1, PLOT_W // cols)
    img = np.repeat(np.repeat(_colours(a), sy, axis=0), sx, axis=1)
    ys, xs = np.nonzero(a > 1.0)
    h, w = img.shape[:2]
    left, top, bar = 56, 30, 16
    title = f"{title} ({int((heat > 1.0).sum())} failing cells)"
    title_x, width = _centred(title, 12, left + w / 2, left + w + 24 + bar + 60)
    height = top + h + 48
    out = [f"<svg class='pic' xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} "
           f"{height}' width='{width}' height='{height}' font-family='sans-serif'>",
           _text(title_x, 16, title, size=12),
           f"<image class='map' data-rows='{rows}' data-cols='{cols}' x='{left}' y='{top}' "
           f"width='{w}' height='{h}' preserveAspectRatio='none' "
           f"style='image-rendering:pixelated' "
           f"href='data:image/png;base64,{base64.b64encode(png(img)).decode('ascii')}'/>",
           f"<rect x='{left}' y='{top}' width='{w}' height='{h}' fill='none' stroke='#444'/>"]
    if 0 < ys.size <= RING_LIMIT:
        out += _marks(ys, xs, sy, sx, left, top)
    for i in integer_ticks(heat.shape[0]):
        y = top + (i + 0.5) / fr * sy
        out.append(f"<line x1='{left - 4}' y1='{y:.1f}' x2='{left}' y2='{y:.1f}' stroke='#444'/>")
        out.append(_text(left - 6, y + 4, i, anchor="end", extra=" class='tick'"))
    for j in integer_ticks(heat.shape[1]):
        x = left + (j + 0.5) / fc * sx
        out.append(f"<line x1='{x:.1f}' y1='{top + h}' x2='{x:.1f}' y2='{top + h + 4}' "
                   "stroke='#444'/>")
        out.append(_text(x, top + h + 16, j, extra=" class='tick'"))
    out.append(_text(left + w / 2, top + h + 36, xlabel))
    out.append(_text(14, top + h / 2, ylabel, extra=f" transform='rotate(-90 14 {top + h / 2:.1f})'"))
    bx = left + w + 24
    out.append(f"<defs><linearGradient id='blues{uid}' x1='0' y1='1' x2='0' y2='0'>" + "".join(
        f"<stop offset='{k / (len(BLUES) - 1):.3f}' stop-color='rgb{c}'/>"
        for k, c in enumerate(BLUES)) + "</linearGradient></defs>")
    out.append(f"<rect x='{bx}' y='{top}' width='{bar}' height='{h}' fill='url(#blues{uid})' "
               "stroke='#444'/>")
    for k, label in enumerate(("1", "0.1", "0.01", "0.001")):
        out.append(_text(bx + bar + 4, top + k * h / 3 + 4, label, anchor="start", size=10))
    out.append(_text(bx + bar + 48, top + h / 2, "error / allowed (red: fails)", size=10,
                     extra=f" transform='rotate(90 {bx + bar + 48} {top + h / 2:.1f})'"))
    out.append("</svg>")
    return "".join(out)


def histogram_svg(counts: list[int], labels: list[str], title: str, xlabel: str) -> str:
    """Bars of the ulp histogram's counts on a logarithmic scale (log10 of 1 + count)."""
    n = len(counts)
    bw, left, top, h = 24, 56, 30, 240
    w = bw * n
    height = top + h + 96
    title_x, width = _centred(title, 12, left + w / 2, left + w + 16)
    label_x, width = _centred(xlabel, 11, left + w / 2, width)
    top_log = math.log10(1 + max(max(counts), 1))
    out = [f"<svg class='pic' xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} "
           f"{height}' width='{width}' height='{height}' font-family='sans-serif'>",
           _text(title_x, 16, title, size=12),
           f"<rect x='{left}' y='{top}' width='{w}' height='{h}' fill='none' stroke='#444'/>"]
    k = 0
    while 10 ** k <= max(counts):
        y = top + h - math.log10(1 + 10 ** k) / top_log * h
        out.append(f"<line x1='{left - 4}' y1='{y:.1f}' x2='{left}' y2='{y:.1f}' stroke='#444'/>")
        out.append(_text(left - 6, y + 4, f"{10 ** k:g}" if k < 6 else f"1e{k}", anchor="end"))
        k += 1
    for i, c in enumerate(counts):
        bh = math.log10(1 + c) / top_log * h
        x = left + i * bw
        if c:
            out.append(f"<rect x='{x + 3}' y='{top + h - bh:.1f}' width='{bw - 6}' "
                       f"height='{bh:.1f}' fill='#4a7ab5'><title>{html.escape(labels[i])}: {c}"
                       "</title></rect>")
        cx, cy = x + bw / 2, top + h + 10
        out.append(_text(cx, cy, labels[i], anchor="end", size=10,
                         extra=f" transform='rotate(-60 {cx:.1f} {cy:.1f})'"))
    out.append(_text(label_x, height - 6, xlabel))
    out.append(_text(14, top + h / 2, "elements",
                     extra=f" transform='rotate(-90 14 {top + h / 2:.1f})'"))
    out.append("</svg>")
    return "".join(out)
