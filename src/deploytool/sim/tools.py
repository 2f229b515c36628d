"""Tool choice by word overlap, and tool-call arguments synthesized from the JSON schema.

The rules (docs/sim.md, "Tools"):
  * Words are lower-cased runs of letters/digits (names are also split on _ - . and
    camelCase), stop words dropped, and crudely stemmed (plural -s/-es/-ies, -ing,
    -ed, final -e) so "temperatures" meets "temperature".
  * score(tool) = 2 x shared stems with the tool's name + shared stems with its
    description and parameter names. The best tool wins (ties: the earlier tool);
    with tool_choice "auto" a tool needs score >= 1, else no tool is called.
  * Values from the prompt: quoted texts first, then runs of capitalized words that
    do not start a sentence (outside quotes); numbers in order of appearance.
  * Two or more values joined by "and" / "," (e.g. "in Paris and in Tokyo") are
    subjects of parallel calls: one call each, the subject filling the first string
    parameter.
Arguments always validate against the schema: required parameters are present,
nothing unknown is added, enums take a listed value.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from deploytool.sim.request import ToolSpec

STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "either",
        "else",
        "etc",
        "for",
        "from",
        "further",
        "get",
        "gets",
        "got",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "let",
        "like",
        "may",
        "me",
        "might",
        "more",
        "most",
        "must",
        "my",
        "need",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "out",
        "over",
        "own",
        "please",
        "per",
        "same",
        "shall",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "upon",
        "us",
        "use",
        "used",
        "uses",
        "using",
        "very",
        "via",
        "want",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "within",
        "without",
        "would",
        "you",
        "your",
        "yours",
        "give",
        "tell",
        "show",
        "find",
        "fetch",
        "retrieve",
        "return",
        "returns",
        "provide",
        "provided",
        "call",
        "calls",
        "function",
        "tool",
        "tools",
        "api",
        "value",
        "values",
        "specified",
        "specific",
        "given",
        "based",
        "current",
        "information",
        "info",
        "detail",
        "details",
        "data",
        "make",
        "makes",
        "take",
        "takes",
        "thing",
        "things",
        "any",
        "anything",
        "something",
        "say",
        "says",
        "know",
        "lot",
        "one",
        "two",
    ]
)

_WORD_RE = re.compile(r"[a-z0-9]+")
_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Quoted values up to 20,000 characters: a long string argument (qualify's >= 2 KB case) is quoted whole.
_QUOTED_RE = re.compile(r"\"([^\"\n]{1,20000})\"|“([^”\n]{1,20000})”|(?<!\w)'([^'\n]{1,200})'(?!\w)")
_CAPITALIZED_RE = re.compile(r"[A-Z][\w'’-]*(?:[ \t]+[A-Z][\w'’-]*)*")
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?![\w])")
_JOIN_RE = re.compile(
    r"[\s\"'“”]*(?:,\s*and|,|and|&)[\s\"'“”]*(?:(?:in|for|of|at|on|to|about|from)\s+)?[\s\"'“”]*",
    re.IGNORECASE,
)
_SENTENCE_END = ".!?:\n"


def stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if len(word) - len(suffix) >= 3 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def stems(text: str) -> set[str]:
    text = _CAMEL_RE.sub(" ", text).replace("_", " ").lower()
    return {stem(w) for w in _WORD_RE.findall(text) if w not in STOP_WORDS}


@dataclass
class ToolScore:
    tool: ToolSpec
    score: int
    shared: list[str]


def score_tools(tools: list[ToolSpec], message: str) -> list[ToolScore]:
    """Scores in tool order; see the module docstring for the formula."""
    wanted = stems(message)
    out = []
    for tool in tools:
        name = stems(tool.name)
        props = (tool.parameters.get("properties") or {}) if isinstance(tool.parameters, dict) else {}
        rest = (stems(tool.description) | stems(" ".join(props))) - name
        shared_name, shared_rest = wanted & name, wanted & rest
        out.append(
            ToolScore(tool, 2 * len(shared_name) + len(shared_rest), sorted(shared_name | shared_rest))
        )
    return out


def best_tool(tools: list[ToolSpec], message: str) -> ToolScore:
    scores = score_tools(tools, message)
    return max(scores, key=lambda s: s.score)  # max keeps the first of equal scores


# --- values found in the prompt ----------------------------------------------------------------


@dataclass
class Span:
    text: str
    start: int
    end: int


@dataclass
class PromptValues:
    text: str
    quoted: list[Span] = field(default_factory=list)
    capitalized: list[Span] = field(default_factory=list)
    numbers: list[float] = field(default_factory=list)

    @classmethod
    def from_text(cls, text: str) -> PromptValues:
        quoted = quoted_values(text)
        inside = [(q.start, q.end) for q in quoted]
        capitalized = [
            c for c in capitalized_values(text) if not any(a <= c.start < b for a, b in inside)
        ]  # a quoted word counts once
        return cls(text=text, quoted=quoted, capitalized=capitalized, numbers=number_values(text))

    @property
    def strings(self) -> list[Span]:
        """String values in the order they are used: quoted texts first, then capitalized words."""
        return self.quoted + self.capitalized


def quoted_values(text: str) -> list[Span]:
    return [
        Span(next(g for g in m.groups() if g is not None), m.start(), m.end())
        for m in _QUOTED_RE.finditer(text)
    ]


def capitalized_values(text: str) -> list[Span]:
    """Runs of capitalized words, leaving out a sentence's first word and "I"."""
    out = []
    for m in _CAPITALIZED_RE.finditer(text):
        words = [(w.group(), m.start() + w.start()) for w in re.finditer(r"\S+", m.group())]
        if _starts_sentence(text, m.start()):
            words = words[1:]  # a sentence's first word is capitalized for grammar, not meaning
        words = [(w, pos) for w, pos in words if w != "I"]
        if words:
            value = " ".join(w for w, _ in words).rstrip("'’")
            out.append(Span(value, words[0][1], m.end()))
    return out


def _starts_sentence(text: str, pos: int) -> bool:
    before = text[:pos].rstrip(" \t\"'“(")
    return not before or before[-1] in _SENTENCE_END


def number_values(text: str) -> list[float]:
    return [float(m.group().replace(",", "")) for m in _NUMBER_RE.finditer(text)]


def parallel_subjects(values: PromptValues) -> list[str]:
    """The longest run of values joined by 'and'/',' that contains an 'and' (else []).
    Quoted values are the candidates when there are two or more; else capitalized ones."""
    spans = values.quoted if len(values.quoted) >= 2 else values.capitalized
    best: list[Span] = []
    run: list[Span] = spans[:1]
    has_and = False
    for prev, cur in itertools.pairwise(spans):
        gap = values.text[prev.end : cur.start]
        if _JOIN_RE.fullmatch(gap):
            run.append(cur)
            has_and = has_and or bool(re.search(r"\band\b|&", gap, re.IGNORECASE))
        else:
            if has_and and len(run) > len(best):
                best = run
            run, has_and = [cur], False
    if has_and and len(run) > len(best):
        best = run
    return [s.text for s in best] if len(best) >= 2 else []


# --- arguments from a JSON schema --------------------------------------------------------------


class ArgumentSynth:
    """Fills a schema from prompt values; each value is used at most once per call."""

    def __init__(self, values: PromptValues, subject: str | None = None, skip: tuple[str, ...] = ()) -> None:
        self.text_lower = values.text.lower()
        self.strings = [s.text for s in values.strings if s.text not in skip]
        if subject is not None:
            self.strings.insert(0, subject)
        self.numbers = list(values.numbers)

    def object(self, schema: dict[str, Any]) -> dict[str, Any]:
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        out: dict[str, Any] = {}
        for name, sub in props.items():
            sub = sub if isinstance(sub, dict) else {}
            if name in required:
                out[name] = self.value(name, sub)
            else:
                optional = self.optional_value(name, sub)
                if optional is not None:
                    out[name] = optional
        return out

    def optional_value(self, name: str, schema: dict[str, Any]) -> Any:
        """Optional parameters appear only when the prompt names one of their enum values
        or sets a boolean to true; everything else is left to the tool's default."""
        schema = _resolve(schema)
        if "enum" in schema:
            hit = self._enum_mentioned(schema["enum"])
            return hit
        if _kind(schema) == "boolean" and self._bool_said(name):
            return True
        return None

    def value(self, name: str, schema: dict[str, Any]) -> Any:
        schema = _resolve(schema)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            hit = self._enum_mentioned(schema["enum"])
            return hit if hit is not None else schema["enum"][0]
        kind = _kind(schema)
        if kind == "string":
            return self._string(name, schema)
        if kind in ("integer", "number"):
            return self._number(schema, integer=kind == "integer")
        if kind == "boolean":
            return self._bool_said(name)
        if kind == "array":
            listed = schema.get("items")
            items = listed if isinstance(listed, dict) else {}
            return [self.value(name, items) for _ in range(int(schema.get("minItems", 0)))]
        if kind == "object":
            return self.object(schema)
        if kind == "null":
            return None
        return self._string(name, schema)  # no type given: a string is valid

    def _string(self, name: str, schema: dict[str, Any]) -> str:
        value = self.strings.pop(0) if self.strings else name
        min_len = int(schema.get("minLength", 0))
        if len(value) < min_len:
            value = value.ljust(min_len, "x")
        if "maxLength" in schema:
            value = value[: int(schema["maxLength"])]
        return value

    def _number(self, schema: dict[str, Any], integer: bool) -> int | float:
        if self.numbers:
            value: float = self.numbers.pop(0)
        elif "default" in schema and isinstance(schema["default"], (int, float)):
            value = schema["default"]
        else:
            value = schema.get("minimum", 1)
        if "minimum" in schema:
            value = max(value, schema["minimum"])
        if "maximum" in schema:
            value = min(value, schema["maximum"])
        if integer or float(value).is_integer():
            return round(value)
        return value

    def _enum_mentioned(self, options: list[Any]) -> Any:
        for option in options:
            if isinstance(option, str) and re.search(
                rf"(?<!\w){re.escape(option.lower())}(?!\w)", self.text_lower
            ):
                return option
        return None

    def _bool_said(self, name: str) -> bool:
        spoken = re.escape(name.lower()).replace("_", "[ _]")
        return bool(re.search(rf"{spoken}\W+(?:\w+\W+)?(?:true|yes)\b", self.text_lower))


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    """anyOf/oneOf: the first non-null option is used."""
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            usable = [o for o in options if isinstance(o, dict) and o.get("type") != "null"]
            merged = {k: v for k, v in schema.items() if k != key}
            merged.update(usable[0] if usable else options[0])
            return merged
    return schema


def _kind(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None and "properties" in schema:
        return "object"
    if kind == "float":  # some hand-written schemas say "float"
        return "number"
    if kind in ("dict",):
        return "object"
    return kind


def synthesize_arguments(
    tool: ToolSpec, values: PromptValues, subject: str | None = None, skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    schema = tool.parameters if isinstance(tool.parameters, dict) else {}
    return ArgumentSynth(values, subject, skip).object(schema)
