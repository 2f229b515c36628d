"""Image measurement with pillow: size, background colour, shapes and their colours.

The rule (docs/sim.md, "Vision"):
  * every pixel is named from a fixed palette by hue/saturation/value;
  * the background is the most common colour name among the border pixels;
  * shapes are 4-connected regions of non-background pixels of at least
    ``min_area`` pixels (smaller specks are ignored);
  * a shape's colour is the most common colour name of its pixels; the image's
    dominant colour is the most common name over all shape pixels.
Ties: the background is the name met first along the top row, bottom row, left column,
right column; a shape's colour the name met first by a depth-first flood fill from its
first pixel (raster order); shapes of one size come in the order of their first pixels.
Images larger than ANALYSIS_MAX_SIDE are shrunk first (nearest neighbour); the reported
size is always the original one.

Pixels are named a whole image at a time in C (pillow's ImageMath and point tables), and
shapes are joined from runs of pixels that a regular expression finds in each row, not pixel
by pixel: tests/test_sim_vision_matches_its_rule.py holds this to a plain pixel-by-pixel
implementation of the rule.
"""

from __future__ import annotations

import base64
import binascii
import colorsys
import hashlib
import io
import re
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, ImageMath, UnidentifiedImageError

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
        return (
            f"Image {index}: {self.shapes} {noun}, mostly {self.dominant} ({detail}), "
            f"on a {self.background} background {size}."
        )


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
    payload = url[match.end() :]
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


PALETTE = (
    "black",
    "white",
    "gray",
    "red",
    "brown",
    "orange",
    "yellow",
    "green",
    "cyan",
    "blue",
    "purple",
    "pink",
)
_PALETTE_INDEX = {name: i for i, name in enumerate(PALETTE)}


# Reports of images seen before, by their bytes' digest: a conversation resends its image every
# turn, and qualify sends the same picture in several modes. Bounded, oldest dropped first.
ANALYSES_MAX = 64
_ANALYSES: OrderedDict[str, ImageReport] = OrderedDict()


def analyse_decoded(decoded: DecodedImage) -> ImageReport:
    """analyse(decoded.image), from the cache when the same bytes were analysed before."""
    cached = _ANALYSES.get(decoded.digest)
    if cached is None:
        cached = _ANALYSES[decoded.digest] = analyse(decoded.image)
        while len(_ANALYSES) > ANALYSES_MAX:
            _ANALYSES.popitem(last=False)
    return ImageReport(
        width=cached.width,
        height=cached.height,
        background=cached.background,
        shapes=cached.shapes,
        shape_colours=list(cached.shape_colours),
    )


def analyse(image: Image.Image) -> ImageReport:
    width, height = image.size
    # An RGB image needs no conversion; shrinking it first spares copying a large one whole
    # (nearest neighbour picks the same pixels either way).
    work = image if image.mode == "RGB" else image.convert("RGB")
    if max(width, height) > ANALYSIS_MAX_SIDE:
        scale = ANALYSIS_MAX_SIDE / max(width, height)
        work = work.resize(
            (max(1, round(width * scale)), max(1, round(height * scale))), Image.Resampling.NEAREST
        )
    w, h = work.size
    names = _name_pixels(work)
    background = _border_colour(names, w, h)
    min_area = max(12, (w * h) // 1000)
    shapes = _shapes(names, w, h, background, min_area)
    # largest first; equal sizes in the order their first pixels come in the image
    shapes.sort(key=lambda shape: (-shape[0], shape[1]))
    colours = [PALETTE[_shape_colour(names, w, h, background, first, runs)] for _, first, runs in shapes]
    return ImageReport(
        width=width, height=height, background=PALETTE[background], shapes=len(shapes), shape_colours=colours
    )


# colour_name's value tests depend on the largest channel alone (value = channel / 255.0): its
# thresholds as channel values, found with the very floats colour_name compares.
_DARK = next(c for c in range(256) if not c / 255.0 < 0.2)  # from here on, not black
_RED = next(c for c in range(256) if c / 255.0 >= 0.45)  # red, not brown
_ORANGE = next(c for c in range(256) if c / 255.0 >= 0.6)  # orange, not brown
_WHITE = next(c for c in range(256) if c / 255.0 > 0.85)  # white, not gray
_VALUE_CLASS = [(c >= _DARK) + (c >= _RED) + (c >= _ORANGE) + (c >= _WHITE) for c in range(256)]
# The hue thresholds (degrees) are multiples of 5: the hue's sector follows from floor(hue / 5).
_HUES = (15, 45, 70, 165, 195, 260, 300, 345)
_SECTOR = [sum(fifths * 5 >= t for t in _HUES) for fifths in range(256)]
_ON_HUE = [int(fifths * 5 in _HUES) for fifths in range(256)]


def _palette_index(code: int) -> int:
    """The name of a pixel coded by _name_pixels as hue sector + 9 x value class + 45 x grey."""
    sector, value, grey = code % 9, code // 9 % 5, code // 45
    if value == 0:
        return _PALETTE_INDEX["black"]
    if grey:
        return _PALETTE_INDEX["white" if value == 4 else "gray"]
    if sector in (0, 8):
        return _PALETTE_INDEX["red" if value >= 2 else "brown"]
    if sector == 1:
        return _PALETTE_INDEX["orange" if value >= 3 else "brown"]
    return _PALETTE_INDEX[("yellow", "green", "cyan", "blue", "purple", "pink")[sector - 2]]


_CODE_TO_INDEX = [_palette_index(code) if code < 90 else 0 for code in range(256)]


def _integer_rule(a: dict[str, Any]) -> tuple[Any, ...]:
    """colour_name's tests in integers, per pixel (ImageMath operands of the channels r, g, b).

    With top and D the largest channel and its difference from the smallest, the saturation is
    D / top, and the hue is 60 x h / D degrees for an integer h (a channel difference plus 0, 2,
    4 or 6 x D by the largest channel). A test that is not exactly on its threshold misses it by
    at least 1/1275 (saturation) or 1/255 degree (hue), far beyond colorsys's float rounding
    (under 1e-9 degree), so comparing integers gives colorsys's answer; exactly on it, rounding
    decides, and colour_name names that pixel (on_edge).

    Returns (fifths, exact, grey, on_saturation, top): fifths = floor(hue / 5 degrees), exact
    where hue / 5 is a whole number, grey where the saturation is under 0.2."""
    r, g, b, high, low = a["r"], a["g"], a["b"], a["max"], a["min"]
    top = high(high(r, g), b)
    d = top - low(low(r, g), b)
    red_top, green_top = r == top, g == top
    h = red_top * (g - b + 6 * d * (g < b)) + (1 - red_top) * (
        green_top * (2 * d + b - r) + (1 - green_top) * (4 * d + r - g)
    )
    twelve = 12 * h  # hue / 5 degrees = 12 h / D
    fifths = twelve / d  # integer division (0 where D is 0: a grey pixel)
    return fifths, twelve == fifths * d, 5 * d < top, 5 * d == top, top


def _combine(a: dict[str, Any]) -> tuple[Any, Any]:
    """(code for _CODE_TO_INDEX, on_edge) from _integer_rule's results and the tables' lookups."""
    grey, on_saturation, value = a["grey"], a["on_saturation"], a["value"]
    code = a["sector"] + 9 * value + 45 * grey
    saturated = 1 - grey - on_saturation
    on_edge = (value > 0) * (on_saturation | (saturated * a["exact"] * a["on_hue"]))
    return code, on_edge


def _name_pixels(img: Image.Image) -> bytes:
    """One palette index per pixel, row by row: colour_name's rule over the whole image at once
    in pillow's ImageMath (C), and colour_name itself for the few pixels exactly on a threshold."""
    r, g, b = (band.convert("I") for band in img.split())
    fifths, exact, grey, on_saturation, top = (
        out.im for out in ImageMath.lambda_eval(_integer_rule, r=r, g=g, b=b)
    )
    fifths = fifths.convert("L")
    code, on_edge = (
        out.im
        for out in ImageMath.lambda_eval(
            _combine,
            sector=fifths.point(_SECTOR),
            on_hue=fifths.point(_ON_HUE),
            exact=exact,
            grey=grey,
            on_saturation=on_saturation,
            value=top.convert("L").point(_VALUE_CLASS),
        )
    )
    names = bytearray(code.convert("L").point(_CODE_TO_INDEX).tobytes())
    raw = img.tobytes()
    named: dict[bytes, int] = {}
    for match in _NONZERO.finditer(on_edge.convert("L").tobytes()):
        i = match.start()
        rgb = raw[3 * i : 3 * i + 3]
        index = named.get(rgb)
        if index is None:
            index = named[rgb] = _PALETTE_INDEX[colour_name((rgb[0], rgb[1], rgb[2]))]
        names[i] = index
    return bytes(names)


_NONZERO = re.compile(b"[^\\x00]")


def _border_colour(names: bytes, w: int, h: int) -> int:
    """The most common name among the border pixels (ties: the first met along the top row,
    bottom row, left column, right column)."""
    border = names[:w] + names[(h - 1) * w : h * w] + names[0 : h * w : w] + names[w - 1 : h * w : w]
    return Counter(border).most_common(1)[0][0]


Runs = list[tuple[int, int]]  # (start, end) of pixels in one row, in raster order


def _shapes(names: bytes, w: int, h: int, background: int, min_area: int) -> list[tuple[int, int, Runs]]:
    """4-connected regions of non-background pixels of at least min_area pixels, as
    (size, first pixel, runs).

    Runs of one row join the runs of the row above that they touch (union-find), so the work
    is per run, not per pixel; the runs themselves are found by a regular expression."""
    other = re.compile(b"[^" + re.escape(bytes([background])) + b"]+")
    parent: list[int] = []
    spans: list[tuple[int, int]] = []

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    above: list[tuple[int, int, int]] = []
    for y in range(h):
        here, j = [], 0
        for match in other.finditer(names, y * w, y * w + w):
            start, end = match.span()
            k = len(parent)
            parent.append(k)
            spans.append((start, end))
            while j < len(above) and above[j][1] <= start - w:
                j += 1
            t = j
            while t < len(above) and above[t][0] < end - w:
                a, b = root(above[t][2]), root(k)
                if a != b:
                    parent[max(a, b)] = min(a, b)  # the earlier run stays the root
                t += 1
            here.append((start, end, k))
        above = here
    shapes: dict[int, Runs] = {}
    for k, span in enumerate(spans):
        shapes.setdefault(root(k), []).append(span)
    found = []
    for runs in shapes.values():
        size = sum(end - start for start, end in runs)
        if size >= min_area:
            found.append((size, runs[0][0], runs))
    return found


def _shape_colour(names: bytes, w: int, h: int, background: int, first: int, runs: Runs) -> int:
    """The most common name of a shape's pixels. Ties go to the name met first by a depth-first
    flood fill from the shape's first pixel (_fill_order), run only for such a tie."""
    pixels = b"".join(names[start:end] for start, end in runs)
    counts = {index: pixels.count(index) for index in set(pixels)}
    most = max(counts.values())
    tied = [index for index, n in counts.items() if n == most]
    if len(tied) == 1:
        return tied[0]
    if names[first] in tied:  # the fill meets its first pixel first
        return names[first]
    return next(names[i] for i in _fill_order(names, w, h, background, first) if names[i] in tied)


def _fill_order(names: bytes, w: int, h: int, background: int, start: int) -> list[int]:
    """The pixels of the shape holding `start`, in the order a depth-first flood fill from it
    meets them (a stack; neighbours up, down, left, right)."""
    seen = bytearray(w * h)
    seen[start] = 1
    stack, order = [start], []
    while stack:
        i = stack.pop()
        order.append(i)
        x = i % w
        for j in (i - w, i + w, i - 1 if x > 0 else -1, i + 1 if x < w - 1 else -1):
            if 0 <= j < w * h and not seen[j] and names[j] != background:
                seen[j] = 1
                stack.append(j)
    return order
