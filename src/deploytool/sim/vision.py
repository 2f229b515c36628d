"""Image measurement with pillow: size, background colour, shapes and their colours.

The rule (docs/sim.md, "Vision"):
  * every pixel is named from a fixed palette by hue/saturation/value;
  * the background is the most common colour name among the border pixels;
  * shapes are 4-connected regions of non-background pixels of at least
    ``min_area`` pixels (smaller specks are ignored);
  * a shape's colour is the most common colour name of its pixels; the image's
    dominant colour is the most common name over all shape pixels.
Images larger than ANALYSIS_MAX_SIDE are shrunk first (nearest neighbour) so a
pure-Python flood fill stays fast; the reported size is always the original one.
"""

from __future__ import annotations

import base64
import binascii
import colorsys
import hashlib
import io
import re
from collections import Counter
from dataclasses import dataclass, field

from PIL import Image, UnidentifiedImageError

ANALYSIS_MAX_SIDE = 320
MAX_IMAGE_BYTES = 20 * 1024 * 1024
_DATA_URL_RE = re.compile(r"^data:(image/[\w.+-]+)?(;[\w=.+-]+)*;base64,", re.IGNORECASE)


class ImageError(ValueError):
    """The image_url cannot be used; the message is shown to the client in the 400 body."""


@dataclass
class DecodedImage:
    image: Image.Image
    digest: str  # identifies the image inside the prefix-cache key


@dataclass
class ImageReport:
    width: int
    height: int
    background: str
    shapes: int
    shape_colours: list[str] = field(default_factory=list)  # one per shape, largest first

    @property
    def dominant(self) -> str | None:
        """Most common shape colour (ties: the colour of the largest shape)."""
        if not self.shape_colours:
            return None
        counts = Counter(self.shape_colours)
        best = max(counts.values())
        return next(c for c in self.shape_colours if counts[c] == best)

    def sentence(self, index: int) -> str:
        size = f"({self.width}x{self.height})"
        if self.shapes == 0:
            return f"Image {index}: no shapes on a {self.background} background {size}."
        noun = "shape" if self.shapes == 1 else "shapes"
        counts = Counter(self.shape_colours)
        if len(counts) == 1:
            return f"Image {index}: {self.shapes} {self.dominant} {noun} on a {self.background} background {size}."
        detail = ", ".join(f"{n} {c}" for c, n in counts.most_common())
        return (f"Image {index}: {self.shapes} {noun}, mostly {self.dominant} ({detail}), "
                f"on a {self.background} background {size}.")


def decode_image_url(url: object) -> DecodedImage:
    """Turn an image_url into a loaded pillow image, or raise ImageError saying why not."""
    if not isinstance(url, str) or not url:
        raise ImageError("image_url.url must be a non-empty string")
    if url.lower().startswith(("http://", "https://")):
        raise ImageError(
            "image_url must be a base64 data URL (data:image/png;base64,...): the simulator has no "
            "network access and does not fetch http(s) URLs"
        )
    match = _DATA_URL_RE.match(url)
    if not match:
        raise ImageError("image_url must be a base64 data URL of the form data:image/<type>;base64,<data>")
    payload = url[match.end():]
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("image_url data is not valid base64") from None
    if not raw:
        raise ImageError("image_url data is empty")
    if len(raw) > MAX_IMAGE_BYTES:
        raise ImageError(f"image is larger than {MAX_IMAGE_BYTES} bytes")
    try:
        image = Image.open(io.BytesIO(raw))
        image.load()
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageError(f"image_url data is not a decodable image ({type(exc).__name__})") from None
    return DecodedImage(image=image, digest=hashlib.blake2b(raw, digest_size=8).hexdigest())


def colour_name(rgb: tuple[int, int, int]) -> str:
    """Name an RGB colour from the fixed palette (thresholds documented in docs/sim.md)."""
    r, g, b = (c / 255.0 for c in rgb[:3])
    hue, sat, val = colorsys.rgb_to_hsv(r, g, b)
    if val < 0.2:
        return "black"
    if sat < 0.2:
        if val > 0.85:
            return "white"
        return "gray"
    deg = hue * 360
    if deg < 15 or deg >= 345:
        return "red" if val >= 0.45 else "brown"
    if deg < 45:
        return "orange" if val >= 0.6 else "brown"
    if deg < 70:
        return "yellow"
    if deg < 165:
        return "green"
    if deg < 195:
        return "cyan"
    if deg < 260:
        return "blue"
    if deg < 300:
        return "purple"
    return "pink"


def analyse(image: Image.Image) -> ImageReport:
    width, height = image.size
    work = image.convert("RGB")
    if max(width, height) > ANALYSIS_MAX_SIDE:
        scale = ANALYSIS_MAX_SIDE / max(width, height)
        work = work.resize((max(1, round(width * scale)), max(1, round(height * scale))), Image.Resampling.NEAREST)
    w, h = work.size
    names = _name_pixels(work)
    background = _border_colour(names, w, h)
    min_area = max(12, (w * h) // 1000)
    regions = _regions(names, w, h, background, min_area)
    regions.sort(key=len, reverse=True)
    colours = [Counter(names[i] for i in region).most_common(1)[0][0] for region in regions]
    return ImageReport(width=width, height=height, background=background, shapes=len(regions),
                       shape_colours=colours)


def _name_pixels(img: Image.Image) -> list[str]:
    # Name each distinct colour once, then map pixels through the table: synthetic images
    # have few distinct colours, so this is far cheaper than naming every pixel.
    w, h = img.size
    distinct = img.getcolors(maxcolors=w * h) or []
    table = {rgb: colour_name(rgb) for _, rgb in distinct}
    raw = img.tobytes()  # RGB triples; stable across pillow versions, unlike getdata()
    return [table[p] for p in zip(raw[0::3], raw[1::3], raw[2::3])]


def _border_colour(names: list[str], w: int, h: int) -> str:
    border = [names[x] for x in range(w)] + [names[(h - 1) * w + x] for x in range(w)]
    border += [names[y * w] for y in range(h)] + [names[y * w + w - 1] for y in range(h)]
    return Counter(border).most_common(1)[0][0]


def _regions(names: list[str], w: int, h: int, background: str, min_area: int) -> list[list[int]]:
    """4-connected components of non-background pixels, at least min_area pixels each."""
    seen = bytearray(w * h)
    for i, name in enumerate(names):
        if name == background:
            seen[i] = 1
    regions = []
    for start in range(w * h):
        if seen[start]:
            continue
        seen[start] = 1
        stack, region = [start], []
        while stack:
            i = stack.pop()
            region.append(i)
            x = i % w
            for j in (i - w, i + w, i - 1 if x > 0 else -1, i + 1 if x < w - 1 else -1):
                if 0 <= j < w * h and not seen[j]:
                    seen[j] = 1
                    stack.append(j)
        if len(region) >= min_area:
            regions.append(region)
    return regions
