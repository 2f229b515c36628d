"""The sim's image analysis (deploytool.sim.vision.analyse, whole images at once in C) gives what
its documented rule gives (docs/sim.md "Vision"), computed here the plain way: every pixel named
by colorsys, the border counted, a depth-first flood fill from each unvisited pixel in raster
order. Compared on the vision suite's real photographs as the sim receives them, its drawn
pictures, and a few hundred random and adversarial images: noise, gradients, speckles, other
image modes, and colours exactly on the hue, saturation and value thresholds, where float
rounding decides."""

from __future__ import annotations

import colorsys
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

from PIL import Image, ImageDraw

from deploytool.qualify.suites import vision as vision_suite
from deploytool.qualify.suites.vision.photos import photo_urls
from deploytool.qualify.suites.vision.pictures import data_url, draw
from deploytool.sim import vision
from deploytool.sim.vision import ANALYSIS_MAX_SIDE, analyse, analyse_decoded, decode_image_url

HUE_THRESHOLDS = (15, 45, 70, 165, 195, 260, 300, 345)


# --- the referee: the documented rule, pixel by pixel -------------------------------------------


def rule_name(rgb: tuple[int, int, int]) -> str:
    """docs/sim.md: value < 0.2 black; saturation < 0.2 white (value > 0.85) or gray; else by hue."""
    hue, sat, val = colorsys.rgb_to_hsv(rgb[0] / 255.0, rgb[1] / 255.0, rgb[2] / 255.0)
    deg = hue * 360
    if val < 0.2:
        return "black"
    if sat < 0.2:
        return "white" if val > 0.85 else "gray"
    if deg < 15 or deg >= 345:
        return "red" if val >= 0.45 else "brown"
    if deg < 45:
        return "orange" if val >= 0.6 else "brown"
    for bound, name in ((70, "yellow"), (165, "green"), (195, "cyan"), (260, "blue"), (300, "purple")):
        if deg < bound:
            return name
    return "pink"


def first_most_common(items: list[str]) -> str:
    """The most common item; of several as common, the one met first."""
    counts = Counter(items)
    return next(item for item in items if counts[item] == max(counts.values()))


def referee(image: Image.Image) -> tuple[Any, ...]:
    width, height = image.size
    work = image.convert("RGB")
    if max(width, height) > ANALYSIS_MAX_SIDE:
        scale = ANALYSIS_MAX_SIDE / max(width, height)
        work = work.resize(
            (max(1, round(width * scale)), max(1, round(height * scale))), Image.Resampling.NEAREST
        )
    w, h = work.size
    named: dict[tuple[int, int, int], str] = {}  # the same colour has the same name: name it once
    raw = work.tobytes()
    names = [
        named[rgb] if rgb in named else named.setdefault(rgb, rule_name(rgb))
        for rgb in zip(raw[0::3], raw[1::3], raw[2::3], strict=False)
    ]
    # the border: top row, bottom row, left column, right column
    border = (
        [names[x] for x in range(w)]
        + [names[(h - 1) * w + x] for x in range(w)]
        + [names[y * w] for y in range(h)]
        + [names[y * w + w - 1] for y in range(h)]
    )
    background = first_most_common(border)
    seen = [name == background for name in names]
    shapes = []
    for start in range(w * h):
        if seen[start]:
            continue
        seen[start] = True
        stack, pixels = [start], []
        while stack:  # depth first; neighbours up, down, left, right
            i = stack.pop()
            pixels.append(i)
            x = i % w
            for j, inside in ((i - w, i >= w), (i + w, i < w * (h - 1)), (i - 1, x > 0), (i + 1, x < w - 1)):
                if inside and not seen[j]:
                    seen[j] = True
                    stack.append(j)
        if len(pixels) >= max(12, (w * h) // 1000):
            shapes.append(pixels)
    shapes.sort(key=len, reverse=True)  # stable: equal sizes stay in the order they were found
    colours = [first_most_common([names[i] for i in pixels]) for pixels in shapes]
    return width, height, background, len(shapes), colours


def product(image: Image.Image) -> tuple[Any, ...]:
    report = analyse(image)
    return report.width, report.height, report.background, report.shapes, report.shape_colours


# --- the images -------------------------------------------------------------------------------


def suite_photos() -> Iterator[tuple[str, Image.Image]]:
    """The vision suite's photographs as the sim decodes them at photo_side, as JPEG or PNG in turn
    (the suite sends both; one of each photo keeps this test's CPU down)."""
    side = vision_suite.Settings().photo_side
    for n, case in enumerate(vision_suite.load_data()["photos"]):
        fmt = ("jpeg", "png")[n % 2]
        _, urls = photo_urls(case["file"], side, ("jpeg", "png"))
        yield f"{case['file']} {fmt}", decode_image_url(urls[fmt]).image


def suite_pictures() -> Iterator[tuple[str, Image.Image]]:
    data = vision_suite.load_data()
    specs = [(case["id"], spec) for case in data["cases"] for spec in case["images"]]
    specs.append(("history", data["history"]["image"]))
    drawn: set[bytes] = set()
    for n, (case, spec) in enumerate(specs):
        image = draw(spec)
        if image.tobytes() not in drawn:
            drawn.add(image.tobytes())
            yield f"{case} {n}", image


def on_threshold_colours() -> list[tuple[int, int, int]]:
    """Colours whose hue is exactly a threshold (an HSV sector's mid channel a whole number), whose
    saturation is exactly 0.2, or whose value is at a threshold, and their neighbours by one."""
    colours = set()
    for degrees in HUE_THRESHOLDS:
        sector, fraction = divmod(degrees, 60)
        for d in range(1, 256):
            if fraction * d % 60:
                continue
            step = fraction * d // 60
            for top in range(d, 256, 7):
                low = top - d
                rising, falling = low + step, top - step
                colours.add(
                    [
                        (top, rising, low),
                        (falling, top, low),
                        (low, top, rising),
                        (low, falling, top),
                        (rising, low, top),
                        (top, low, falling),
                    ][sector]
                )
    for top in range(5, 256, 5):  # saturation exactly 0.2: top - low = top / 5
        for mid in range(top - top // 5, top + 1, 3):
            colours.update(
                {(top, mid, top - top // 5), (top - top // 5, top, mid), (mid, top - top // 5, top)}
            )
    for top in (50, 51, 52, 114, 115, 116, 152, 153, 154, 216, 217, 218):  # value thresholds
        colours.update({(top, top // 3, 0), (top, top, top), (0, top, top // 2), (top // 2, 0, top)})
    near = {
        tuple(min(255, max(0, c + delta)) for c in rgb) for rgb in list(colours)[::5] for delta in (-1, 1)
    }
    return sorted(colours | near)


def swatches(colours: list[tuple[int, int, int]], rng: random.Random) -> Iterator[Image.Image]:
    """The colours as blocks of 12 pixels (each its own shape unless named as the background),
    180 to an image, on a background of one of them."""
    for at in range(0, len(colours), 180):
        chunk = colours[at : at + 180]
        image = Image.new("RGB", (60, 60), rng.choice(chunk))
        pen = ImageDraw.Draw(image)
        for k, rgb in enumerate(chunk):
            x, y = 5 * (k % 12), 4 * (k // 12)
            pen.rectangle((x + 1, y + 1, x + 4, y + 3), fill=rgb)
        yield image


def random_images(
    rng: random.Random, threshold: list[tuple[int, int, int]]
) -> Iterator[tuple[str, Image.Image]]:
    def colour() -> tuple[int, int, int]:
        return (
            rng.choice(threshold)
            if rng.random() < 0.3
            else (rng.randrange(256), rng.randrange(256), rng.randrange(256))
        )

    for n in range(240):
        kind = n % 6
        w, h = (
            rng.choice([(1, 1), (1, 40), (40, 1), (2, 30)])
            if n % 25 == 0
            else (rng.randint(3, 40), rng.randint(3, 40))
        )
        if kind == 0:  # few colours, speckled: shapes touching, ties in counts and on the border
            palette = [colour() for _ in range(rng.randint(2, 4))]
            image = Image.new("RGB", (w, h))
            image.putdata([rng.choice(palette) for _ in range(w * h)])
        elif kind == 1:  # every pixel its own colour
            image = Image.frombytes("RGB", (w, h), rng.randbytes(3 * w * h))
        elif kind == 2:  # a gradient through hues or values
            a, b = colour(), colour()
            image = Image.new("RGB", (w, h))
            image.putdata(
                [
                    tuple(round(a[c] + (b[c] - a[c]) * ((i % w) + (i // w)) / (w + h)) for c in range(3))
                    for i in range(w * h)
                ]
            )
        elif kind == 3:  # blobs and specks on a background, as a drawing
            image = Image.new("RGB", (w, h), colour())
            pen = ImageDraw.Draw(image)
            for _ in range(rng.randint(1, 8)):
                x, y = rng.randrange(w), rng.randrange(h)
                box = (x, y, x + rng.randint(0, 12), y + rng.randint(0, 12))
                (pen.ellipse if rng.random() < 0.5 else pen.rectangle)(box, fill=colour())
        elif kind == 4:  # two colours in equal halves of a shape: a tie the flood fill's order breaks
            image = Image.new("RGB", (w, h), (255, 255, 255))
            a, b = colour(), colour()
            image.putdata(
                [
                    (a if (i % w + i // w + n) % 2 else b)
                    if 0 < i % w < w - 1 and 0 < i // w < h - 1
                    else (255, 255, 255)
                    for i in range(w * h)
                ]
            )
        else:  # another mode, converted to RGB first
            mode = rng.choice(["L", "LA", "RGBA", "P", "1", "CMYK"])
            image = Image.frombytes("RGB", (w, h), rng.randbytes(3 * w * h)).convert(mode)
        yield f"random {n} kind {kind} {w}x{h}", image
    for size in ((400, 30), (700, 321), (321, 5)):  # shrunk first, nearest neighbour
        image = Image.new("RGB", size, colour())
        ImageDraw.Draw(image).ellipse((10, 2, size[0] // 2, size[1] - 2), fill=colour())
        yield f"large {size}", image


# --- the comparisons ----------------------------------------------------------------------------


def test_the_suites_photos_are_measured_as_the_rule_says() -> None:
    for label, image in suite_photos():
        assert product(image) == referee(image), label


def test_the_suites_drawn_pictures_are_measured_as_the_rule_says() -> None:
    for label, image in suite_pictures():
        assert product(image) == referee(image), label


def test_colours_on_the_thresholds_are_named_as_colorsys_names_them() -> None:
    rng = random.Random(7)
    colours = on_threshold_colours()
    assert len(colours) > 10_000
    for n, image in enumerate(swatches(rng.sample(colours, 3600), rng)):
        assert product(image) == referee(image), f"swatch {n}"


def test_random_and_adversarial_images_are_measured_as_the_rule_says() -> None:
    rng = random.Random(20240611)
    for label, image in random_images(rng, on_threshold_colours()):
        assert product(image) == referee(image), label


def test_a_resent_image_is_measured_once_and_each_caller_gets_its_own_report() -> None:
    url = data_url(draw({"shapes": [{"kind": "circle", "colour": "red", "count": 2}]}))
    first = analyse_decoded(decode_image_url(url))
    first.shape_colours.append("blue")  # a caller changing its report changes no other's
    again = analyse_decoded(decode_image_url(url))
    assert (again.shapes, again.shape_colours, again.background) == (2, ["red", "red"], "white")
    assert len(vision._ANALYSES) <= vision.ANALYSES_MAX
