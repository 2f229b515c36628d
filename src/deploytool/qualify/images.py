"""Test images drawn with pillow, so the right answer is known by construction.

Shapes sit on a grid with gaps between them (so each is its own connected region), in
saturated colours on white, without anti-aliasing (so no in-between colours appear).
"""

from __future__ import annotations

import base64
import io
from typing import Any

from PIL import Image, ImageDraw, ImageFont

SIZE = 320
COLOURS = {
    "red": (220, 20, 20),
    "green": (20, 150, 40),
    "blue": (30, 60, 220),
    "yellow": (250, 210, 0),
    "black": (0, 0, 0),
    "orange": (250, 140, 0),
    "purple": (130, 40, 180),
}
KINDS = ("circle", "square", "triangle")


def draw(spec: dict[str, Any], size: int = SIZE) -> Image.Image:
    """One image from a case's spec: {shapes: [{kind, colour, count}], text: {value, colour}}."""
    image = Image.new("RGB", (size, size), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    shapes = [(s["kind"], s["colour"]) for s in spec.get("shapes", []) for _ in range(int(s.get("count", 1)))]
    if len(shapes) > 9:
        raise ValueError(f"at most 9 shapes fit one {size}px image, got {len(shapes)}")
    cell = size // 3
    radius = cell // 3
    for slot, (kind, colour) in enumerate(shapes):
        if kind not in KINDS or colour not in COLOURS:
            raise ValueError(f"unknown shape {kind!r} or colour {colour!r} (known: {KINDS}, {sorted(COLOURS)})")
        cx, cy = cell * (slot % 3) + cell // 2, cell * (slot // 3) + cell // 2
        box = (cx - radius, cy - radius, cx + radius, cy + radius)
        fill = COLOURS[colour]
        if kind == "circle":
            pen.ellipse(box, fill=fill)
        elif kind == "square":
            pen.rectangle(box, fill=fill)
        else:
            pen.polygon([(cx, cy - radius), (cx - radius, cy + radius), (cx + radius, cy + radius)], fill=fill)
    text = spec.get("text")
    if text:
        font = ImageFont.load_default(size=size // 5)
        left, top, right, bottom = pen.textbbox((0, 0), text["value"], font=font)
        origin = ((size - (right - left)) // 2 - left, (size - (bottom - top)) // 2 - top)
        pen.text(origin, text["value"], fill=COLOURS[text["colour"]], font=font)
    return image


def data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
