"""lm-evaluation-harness's `gsm8k` task, as chat, reproduced so the figure can sit next to a
published lm-eval number (lm-eval 0.4.13, lm_eval/tasks/gsm8k/gsm8k.yaml, read and run here):

* prompt: `Question: {question}\\nAnswer:`; 5 few-shot examples from the train split as
  user/assistant turns (`--apply_chat_template --fewshot_as_multiturn`), the assistant turn being
  the train answer verbatim (calculator annotations included);
* few-shot choice: lm-eval's ContextSampler, `random.Random(1234)` (its default fewshot seed)
  drawing `sample(train, 5)` once per test document, in document order (checked against
  lm-eval's own logged prompts: 100 of 100 identical). The train documents those draws reach
  ship in data/gsm8k/train_lmeval_fewshot.jsonl.gz with their train index;
* request: `stop` = ["Question:", "</s>", "<|im_end|>"], `max_tokens` 256 (lm-eval's
  max_gen_toks), temperature 0, seed 1234 (local-chat-completions' payload);
* filters on the reply's `content`: `strict-match` = first match of `#### (\\-?[0-9\\.\\,]+)`;
  `flexible-extract` = last match of `(-?[$0-9.,]{2,})|(-?[0-9]+)` (first non-empty group);
  no match is `[invalid]`;
* exact_match: the regexes `,`, `\\$`, `(?s).*#### `, `\\.$` removed (in that order) from
  prediction and target (the full train answer), case ignored, then string equality.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from functools import lru_cache
from importlib import resources
from typing import Any

TRAIN_SIZE = 7473  # GSM8K train split: the population lm-eval's sampler draws from
FEWSHOT_SEED = 1234
STOP = ["Question:", "</s>", "<|im_end|>"]
MAX_GEN_TOKS = 256
SEED = 1234
FALLBACK = "[invalid]"
STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORE = (",", "\\$", "(?s).*#### ", "\\.$")
FILTERS = ("strict-match", "flexible-extract")


def doc_to_text(question: str) -> str:
    return f"Question: {question}\nAnswer:"


@lru_cache(maxsize=1)
def _train_docs() -> dict[int, dict[str, str]]:
    path = resources.files("deploytool") / "data" / "gsm8k" / "train_lmeval_fewshot.jsonl.gz"
    rows = [
        json.loads(line) for line in gzip.decompress(path.read_bytes()).decode("utf-8").splitlines() if line
    ]
    return {row["index"]: row for row in rows}


def fewshot_indices(n_docs: int, n_shots: int = 5, seed: int = FEWSHOT_SEED) -> list[list[int]]:
    """The train indices lm-eval's sampler draws for test documents 0..n_docs-1."""
    rnd = random.Random(seed)
    return [rnd.sample(range(TRAIN_SIZE), n_shots) if n_shots else [] for _ in range(n_docs)]


def messages(question: str, shots: list[int]) -> list[dict[str, str]]:
    """The chat lm-eval sends for one test question with these train documents as examples."""
    train = _train_docs()
    out: list[dict[str, str]] = []
    for index in shots:
        doc = train[index]
        out.append({"role": "user", "content": doc_to_text(doc["question"])})
        out.append({"role": "assistant", "content": doc["answer"]})
    out.append({"role": "user", "content": doc_to_text(question)})
    return out


def regex_filter(response: str, pattern: re.Pattern[str], group_select: int) -> str:
    """lm-eval's RegexFilter: findall, pick one match, first non-empty group, strip."""
    found = pattern.findall(response or "")
    if not found:
        return FALLBACK
    match: Any = found[group_select]
    if isinstance(match, tuple):
        groups = [m for m in match if m]
        match = groups[0] if groups else FALLBACK
    return match.strip()


def extract(response: str) -> dict[str, str]:
    return {
        "strict-match": regex_filter(response, STRICT, 0),
        "flexible-extract": regex_filter(response, FLEXIBLE, -1),
    }


def normalise(text: str) -> str:
    for pattern in IGNORE:
        text = re.sub(pattern, "", text)
    return text.lower()


def exact_match(prediction: str, target: str) -> bool:
    return normalise(prediction) == normalise(target)
