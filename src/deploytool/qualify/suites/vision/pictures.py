"""Test images drawn with pillow, so the right answer is known by construction.

Shapes sit on a grid with gaps between them (so each is its own connected region), in
saturated colours on white, without anti-aliasing (so no in-between colours appear).
Text (a word's colour, or a code word and a number to read) is drawn large and centred with
Pillow's built-in font, so no system font is needed and the bytes are the same on every run.
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
# Text keeps 1/TEXT_MARGIN of the side clear at each edge; its font is never under MIN_TEXT_SIZE px.
TEXT_MARGIN = 16
MIN_TEXT_SIZE = 24


def draw(spec: dict[str, Any], size: int = SIZE) -> Image.Image:
    """One image from a case's spec: {shapes: [{kind, colour, count}], text: {value, colour}}.

    Text (colour black unless told) is drawn large and centred, for colour questions and for
    reading; a spec with text has no shapes in practice (they would overlap)."""
    image = Image.new("RGB", (size, size), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    shapes = [(s["kind"], s["colour"]) for s in spec.get("shapes", []) for _ in range(int(s.get("count", 1)))]
    if len(shapes) > 9:
        raise ValueError(f"at most 9 shapes fit one {size}px image, got {len(shapes)}")
    cell = size // 3
    radius = cell // 3
    for slot, (kind, colour) in enumerate(shapes):
        if kind not in KINDS or colour not in COLOURS:
            raise ValueError(
                f"unknown shape {kind!r} or colour {colour!r} (known: {KINDS}, {sorted(COLOURS)})"
            )
        cx, cy = cell * (slot % 3) + cell // 2, cell * (slot // 3) + cell // 2
        box = (cx - radius, cy - radius, cx + radius, cy + radius)
        fill = COLOURS[colour]
        if kind == "circle":
            pen.ellipse(box, fill=fill)
        elif kind == "square":
            pen.rectangle(box, fill=fill)
        else:
            pen.polygon(
                [(cx, cy - radius), (cx - radius, cy + radius), (cx + radius, cy + radius)], fill=fill
            )
    text = spec.get("text")
    if text:
        colour = text.get("colour", "black")
        if colour not in COLOURS:
            raise ValueError(f"unknown text colour {colour!r} (known: {sorted(COLOURS)})")
        font, origin, _ = text_layout(pen, str(text["value"]), size)
        pen.text(origin, str(text["value"]), fill=COLOURS[colour], font=font)
    return image


def text_layout(
    pen: ImageDraw.ImageDraw, value: str, size: int = SIZE
) -> tuple[ImageFont.FreeTypeFont | ImageFont.ImageFont, tuple[int, int], tuple[int, int, int, int]]:
    """The font, origin and drawn bounding box of `value` centred in a size x size image.

    The font is Pillow's built-in one (Aileron, needs Pillow >= 10.1 with FreeType; no system
    font, so the pixels are the same on every machine with the same Pillow), at a fifth of the
    image's side, made smaller only when the text would come closer than size / TEXT_MARGIN to an edge.
    """
    margin = size // TEXT_MARGIN
    font_size = size // 5
    while True:
        font = ImageFont.load_default(size=font_size)
        # whole pixels: Pillow's stubs say float, a FreeType font measures in ints
        left, top, right, bottom = (int(v) for v in pen.textbbox((0, 0), value, font=font))
        if right - left <= size - 2 * margin or font_size <= MIN_TEXT_SIZE:
            break
        font_size -= 1
    if right - left > size - 2 * margin:
        raise ValueError(f"text {value!r} does not fit a {size}px image at {MIN_TEXT_SIZE}px or more")
    origin = ((size - (right - left)) // 2 - left, (size - (bottom - top)) // 2 - top)
    box = (origin[0] + left, origin[1] + top, origin[0] + right, origin[1] + bottom)
    return font, origin, box


def data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
