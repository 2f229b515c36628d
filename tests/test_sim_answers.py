"""deploytool.sim: the documented answer rules (tools, vision, needle, GSM8K oracle, math, echo)."""

from __future__ import annotations

import base64
import io
import json
import re
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image, ImageDraw
from sim_settings import FAST

from deploytool.sim import SimSettings, serve_in_thread
from deploytool.sim.oracle import FORMATS, Gsm8kOracle

CHAT = "/v1/chat/completions"
GSM8K = (
    Path(__file__).resolve().parents[1] / "src" / "deploytool" / "data" / "gsm8k" / "test.jsonl"
)  # shipped

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "include_hourly": {"type": "boolean"},
            },
            "required": ["city", "days"],
        },
    },
}
STOCK = {
    "type": "function",
    "function": {
        "name": "get_stock_price",
        "description": "Look up the latest trading price of a stock ticker symbol",
        "parameters": {
            "type": "object",
            "properties": {"ticker": {"type": "string"}},
            "required": ["ticker"],
        },
    },
}
TRIANGLE = {
    "type": "function",
    "function": {
        "name": "calculate_triangle_area",
        "description": "Compute the area of a triangle from its base and height",
        "parameters": {
            "type": "object",
            "properties": {"base": {"type": "number"}, "height": {"type": "number"}},
            "required": ["base", "height"],
        },
    },
}
TOOLS = [STOCK, WEATHER, TRIANGLE]


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with (
        serve_in_thread(SimSettings(**FAST), wait_ready=True) as sim,
        httpx.Client(base_url=sim.url, timeout=30) as c,
    ):
        yield c


def ask(client: httpx.Client, content: Any, **extra: Any) -> dict[str, Any]:
    resp = client.post(CHAT, json={"messages": [{"role": "user", "content": content}], **extra})
    assert resp.status_code == 200, resp.text
    return resp.json()


def message(out: dict[str, Any]) -> dict[str, Any]:
    return out["choices"][0]["message"]


def stream_tool_deltas(client: httpx.Client, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    deltas, finish = [], None
    with client.stream("POST", CHAT, json={**body, "stream": True}) as resp:
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[6:])["choices"][0]
            finish = choice["finish_reason"] or finish
            deltas += choice["delta"].get("tool_calls") or []
    return deltas, finish


# --- tools ---------------------------------------------------------------------------------------


def test_tool_call_picks_best_tool_and_fills_schema(client: httpx.Client) -> None:
    out = ask(client, "What will the weather be in Lisbon over the next 3 days, in fahrenheit?", tools=TOOLS)
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    msg = message(out)
    assert msg["content"] == ""  # sglang's non-streamed tool-call answer keeps no normal text
    (call,) = msg["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_current_weather"
    args = json.loads(call["function"]["arguments"])
    assert args == {"city": "Lisbon", "days": 3, "unit": "fahrenheit"}  # optional bool left out: not said


def test_streamed_tool_call_deltas_concatenate_to_the_call(client: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": "Stock price for 'NVDA' please"}], "tools": TOOLS}
    plain = message(client.post(CHAT, json=body).json())["tool_calls"][0]
    deltas, finish = stream_tool_deltas(client, body)
    assert finish == "tool_calls"
    head, rest = deltas[0], deltas[1:]
    assert head["index"] == 0 and head["id"].startswith("call_") and head["type"] == "function"
    assert head["function"] == {"name": "get_stock_price", "arguments": ""}
    # sglang's qwen25 parser streams a one-parameter call's arguments as one delta (sim/toolformats.py)
    assert len(rest) == 1 and all(d["id"] is None and d["function"]["name"] is None for d in rest)
    arguments = "".join(d["function"]["arguments"] for d in rest)
    assert json.loads(arguments) == json.loads(plain["function"]["arguments"]) == {"ticker": "NVDA"}


def test_parallel_calls_one_per_subject(client: httpx.Client) -> None:
    for text in (
        "What's the weather in Paris and in Tokyo for 2 days?",
        "Weather for 'Paris' and 'Tokyo', 2 days",
    ):
        calls = message(ask(client, text, tools=TOOLS))["tool_calls"]
        assert [json.loads(c["function"]["arguments"])["city"] for c in calls] == ["Paris", "Tokyo"]
        assert all(json.loads(c["function"]["arguments"])["days"] == 2 for c in calls)
        assert len({c["id"] for c in calls}) == 2
    deltas, _ = stream_tool_deltas(
        client, {"messages": [{"role": "user", "content": "weather in Oslo and Rome"}], "tools": TOOLS}
    )
    heads = [d for d in deltas if d["id"]]
    assert [h["index"] for h in heads] == [0, 1]
    for i, city in enumerate(["Oslo", "Rome"]):
        args = "".join(d["function"]["arguments"] for d in deltas if d["index"] == i and not d["id"])
        assert json.loads(args)["city"] == city
    single = message(ask(client, "weather in Oslo and Rome", tools=TOOLS, parallel_tool_calls=False))
    assert len(single["tool_calls"]) == 1


def test_irrelevant_request_calls_no_tool(client: httpx.Client) -> None:
    out = ask(client, "Write a haiku about autumn leaves.", tools=TOOLS)
    assert out["choices"][0]["finish_reason"] == "stop"
    msg = message(out)
    assert msg.get("tool_calls") is None
    assert "None of the provided tools applies" in msg["content"]


def test_tool_choice_none_required_and_named(client: httpx.Client) -> None:
    none = message(ask(client, "weather in Paris", tools=TOOLS, tool_choice="none"))
    assert none.get("tool_calls") is None
    required = message(ask(client, "Write a haiku", tools=TOOLS, tool_choice="required"))
    assert required["tool_calls"][0]["function"]["name"] == "get_stock_price"  # no match: the first tool
    named = message(
        ask(
            client,
            "weather in Paris",
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "calculate_triangle_area"}},
        )
    )
    (call,) = named["tool_calls"]
    assert call["function"]["name"] == "calculate_triangle_area"
    assert json.loads(call["function"]["arguments"]) == {"base": 1, "height": 1}


def test_numbers_fill_numeric_parameters(client: httpx.Client) -> None:
    call = message(ask(client, "Compute the area of a triangle with base 10 and height 4.5", tools=TOOLS))
    args = json.loads(call["tool_calls"][0]["function"]["arguments"])
    assert args == {"base": 10, "height": 4.5}


def test_tool_result_round_trip(client: httpx.Client) -> None:
    first = message(ask(client, "weather in Paris for 1 day", tools=TOOLS))
    call = first["tool_calls"][0]
    convo = [
        {"role": "user", "content": "weather in Paris for 1 day"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": '{"temp_c": 18, "sky": "clear"}'},
    ]
    out = client.post(CHAT, json={"messages": convo, "tools": TOOLS}).json()
    msg = message(out)
    assert msg.get("tool_calls") is None and out["choices"][0]["finish_reason"] == "stop"
    assert msg["content"] == 'The tool returned: {"temp_c": 18, "sky": "clear"}'


def test_no_tools_setting_leaves_raw_call_text() -> None:
    with serve_in_thread(SimSettings(**FAST, tools=False)) as sim:
        out = httpx.post(
            sim.url + CHAT,
            json={"messages": [{"role": "user", "content": "weather in Paris"}], "tools": TOOLS},
        ).json()
    msg = message(out)
    assert msg.get("tool_calls") is None and out["choices"][0]["finish_reason"] == "stop"
    assert msg["content"].startswith("<tool_call>") and '"name": "get_current_weather"' in msg["content"]


def test_json_schema_response_format(client: httpx.Client) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    out = ask(
        client,
        "My friend 'Ada' is 36 years old.",
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
    )
    assert json.loads(message(out)["content"]) == {"name": "Ada", "age": 36}


# --- vision --------------------------------------------------------------------------------------


def png_url(img: Image.Image) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def circles(
    colour: Any, count: int, background: str = "white", size: tuple[int, int] = (256, 256)
) -> Image.Image:
    img = Image.new("RGB", size, background)
    draw = ImageDraw.Draw(img)
    for i in range(count):
        x, y = 40 + (i % 3) * 80, 50 + (i // 3) * 90
        draw.ellipse([x - 25, y - 25, x + 25, y + 25], fill=colour)
    draw.point((200, 230), fill="black")  # a speck: too small to be a shape
    return img


def image_question(text: str, *images: Image.Image) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": png_url(i)}} for i in images]
    return [*parts, {"type": "text", "text": text}]


def test_image_shapes_colour_and_size(client: httpx.Client) -> None:
    out = ask(client, image_question("Describe the image.", circles((220, 30, 30), 3)))
    assert message(out)["content"] == "Image 1: 3 red shapes on a white background (256x256)."
    # overhead + the image as Qwen's processor counts a 256x256 one (16x16 patches, 2x2 merged, + 2) + the text
    assert out["usage"]["prompt_tokens"] == 4 + (16 * 16 // 4 + 2) + 4


def test_image_how_many_and_colour_lead(client: httpx.Client) -> None:
    many = message(ask(client, image_question("How many circles are there?", circles("blue", 5))))["content"]
    assert many.startswith("5. Image 1: 5 blue shapes")
    colour = message(
        ask(
            client,
            image_question("What colour are the circles?", circles((20, 160, 40), 2, background="black")),
        )
    )["content"]
    assert colour.startswith("Green. ") and "black background" in colour


def test_multiple_images_in_order(client: httpx.Client) -> None:
    text = message(
        ask(
            client,
            image_question(
                "How many shapes in each?", circles("red", 1), circles("yellow", 4, size=(300, 200))
            ),
        )
    )["content"]
    assert text == (
        "1 and 4. Image 1: 1 red shape on a white background (256x256). "
        "Image 2: 4 yellow shapes on a white background (300x200)."
    )


@pytest.mark.parametrize(
    "url, reason",
    [
        ("https://example.com/cat.png", "no network"),
        ("data:image/png;base64,@@@notbase64@@@", "not valid base64"),
        (
            "data:image/png;base64," + base64.b64encode(b"definitely not a png").decode(),
            "not a decodable image",
        ),
        ("file:///etc/passwd", "base64 data URL"),
    ],
)
def test_unusable_image_url_is_400(client: httpx.Client, url: str, reason: str) -> None:
    resp = client.post(
        CHAT,
        json={
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": url}},
                        {"type": "text", "text": "what is this"},
                    ],
                }
            ]
        },
    )
    assert resp.status_code == 400
    assert resp.json()["object"] == "error" and reason in resp.json()["message"]


def test_no_vision_setting_refuses_images() -> None:
    with serve_in_thread(SimSettings(**FAST, vision=False)) as sim:
        resp = httpx.post(
            sim.url + CHAT,
            json={"messages": [{"role": "user", "content": image_question("hi", circles("red", 1))}]},
        )
        info = httpx.get(sim.url + "/get_model_info").json()
    assert resp.status_code == 400 and "images" in resp.json()["message"]
    assert info["has_image_understanding"] is False


# --- needle / retrieval ----------------------------------------------------------------------------


def haystack(words: int, needles: dict[int, str]) -> str:
    filler = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
    unit = len(filler.split())
    parts = []
    for i in range(words // unit):
        parts.append(filler)
        if i in needles:
            parts.append(needles[i])
    return "".join(parts)


def test_needle_in_a_200k_token_prompt(client: httpx.Client) -> None:
    text = haystack(170_000, {4000: "One of the special magic numbers for quiet-harbor is: 8231947. "})
    question = "\nWhat is the special magic number for quiet-harbor mentioned in the provided text?"
    t0 = time.monotonic()
    ask(
        client,
        haystack(17_000, {400: "One of the special magic numbers for quiet-harbor is: 8231947. "}) + question,
    )
    tenth = time.monotonic() - t0
    t0 = time.monotonic()
    out = ask(client, text + question)
    assert time.monotonic() - t0 < 30 * max(
        tenth, 0.05
    )  # ten times the prompt: about linear, never quadratic
    assert out["usage"]["prompt_tokens"] > 200_000
    assert message(out)["content"] == "The special magic number for quiet-harbor is 8231947."


def test_needle_all_values_and_missing(client: httpx.Client) -> None:
    text = haystack(
        3000,
        {
            3: "A special magic number for red-fox is 111. ",
            9: "Remember: 222 is a special magic number for red-fox. ",
        },
    )
    out = ask(client, text + "\nWhat are all the special magic numbers for red-fox mentioned in the text?")
    assert message(out)["content"] == "The special magic numbers for red-fox are 111 and 222."
    missing = ask(client, text + "\nWhat is the special magic number for blue-whale?")
    assert (
        message(missing)["content"]
        == "I could not find the special magic number for blue-whale in the provided text."
    )


def test_generic_retrieval_question(client: httpx.Client) -> None:
    convo = [
        {
            "role": "system",
            "content": "Reference: the access code for the north gate is 4471. "
            "The access code for the south gate is 9902.",
        },
        {"role": "user", "content": "What is the access code for the south gate?"},
    ]
    out = client.post(CHAT, json={"messages": convo}).json()
    assert message(out)["content"] == "The access code for the south gate is 9902."


# --- math and echo ---------------------------------------------------------------------------------


def test_math_without_oracle_answers_last_number(client: httpx.Client) -> None:
    out = ask(client, "Tom has 3 apples and buys 4 more. How many apples does he have now? Use 2 hands.")
    assert message(out)["content"] == "The answer is 2."


def test_echo_rule(client: httpx.Client) -> None:
    text = "Please summarise the plot of a long novel that I have not given you yet, in two paragraphs or so."
    out = ask(client, text)
    assert message(out)["content"] == (
        f"Simulator reply: I received {out['usage']['prompt_tokens']} tokens; "
        f"the last user message was: '{text[:80]}'"
    )


# --- GSM8K oracle ----------------------------------------------------------------------------------


def final_number(text: str) -> Decimal | None:
    """A scorer that honours explicit answer markers before falling back to anything else."""
    for pattern in (
        r"####\s*\$?(-?[\d,]+(?:\.\d+)?)",
        r"\\boxed\{\$?(-?[\d,]+(?:\.\d+)?)\}",
        r"answer is\s*\$?(-?[\d,]+(?:\.\d+)?)",
    ):
        match = re.search(pattern, text)
        if match:
            return Decimal(match.group(1).replace(",", ""))
    return None


def gsm8k_rows(n: int) -> list[dict[str, str]]:
    with GSM8K.open() as fh:
        return [json.loads(next(fh)) for _ in range(n)]


def key(row: dict[str, str]) -> Decimal:
    return Decimal(row["answer"].rsplit("####", 1)[1].strip().replace(",", ""))


def test_oracle_answers_last_question_of_a_few_shot_prompt() -> None:
    rows = gsm8k_rows(12)
    settings = SimSettings(**FAST, gsm8k_oracle=1.0, gsm8k_path=str(GSM8K))
    with serve_in_thread(settings) as sim, httpx.Client(base_url=sim.url) as c:
        for target in rows[4:12]:
            shots = "".join(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in rows[:3])
            prompt = shots + f"Question: {target['question']}\nAnswer:"
            out = c.post(CHAT, json={"messages": [{"role": "user", "content": prompt}]}).json()
            assert final_number(message(out)["content"]) == key(target), message(out)["content"]


def test_oracle_zero_accuracy_is_off_by_one() -> None:
    row = gsm8k_rows(1)[0]
    settings = SimSettings(**FAST, gsm8k_oracle=0.0, gsm8k_path=str(GSM8K))
    with serve_in_thread(settings) as sim:
        out = httpx.post(
            sim.url + CHAT, json={"messages": [{"role": "user", "content": row["question"]}]}
        ).json()
    assert final_number(message(out)["content"]) == key(row) + 1


def test_oracle_accuracy_fraction_is_deterministic_and_formats_rotate() -> None:
    oracle = Gsm8kOracle.load(str(GSM8K), 0.6)
    rows = gsm8k_rows(400)
    answers = [oracle.answer(r["question"]) for r in rows]
    assert all(a is not None for a in answers)
    right = sum(a.is_correct for a in answers)  # type: ignore[union-attr]
    assert 0.53 <= right / len(rows) <= 0.67
    assert [a.text for a in answers[:50]] == [oracle.answer(r["question"]).text for r in rows[:50]]  # type: ignore[union-attr]
    for a, r in zip(answers, rows, strict=False):
        assert final_number(a.text) == (key(r) if a.is_correct else key(r) + 1)  # type: ignore[union-attr]
    texts = [a.text for a in answers]  # type: ignore[union-attr]
    assert any("####" in t for t in texts) and any("\\boxed{" in t for t in texts)
    assert any(re.search(r"\$\d+\.00", t) for t in texts)
    assert any(re.search(r"is \d{1,3}(,\d{3})+\.", t) for t in texts)  # thousands separators
    assert any(re.fullmatch(r"The answer is -?\d+\.", t) for t in texts)
    assert len(FORMATS) == 5


def test_oracle_uses_the_packaged_test_set_by_default() -> None:
    from importlib import resources

    packaged = resources.files("deploytool") / "data" / "gsm8k" / "test.jsonl"
    row = json.loads(packaged.read_text(encoding="utf-8").splitlines()[5])
    found = Gsm8kOracle.load(None, 1.0).answer("Solve this.\n" + row["question"] + "\nThink step by step.")
    assert found is not None and final_number(found.text) == key(row)


def test_oracle_without_its_data_refuses_to_start() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "deploytool.sim",
            "--gsm8k-oracle",
            "0.9",
            "--gsm8k-path",
            "/nonexistent/test.jsonl",
        ],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 2 and "GSM8K" in proc.stderr
