"""Settings of the reference runtime: one dataclass, filled from defaults, env, then flags.

Every field is one command-line flag (``--field-name``) and one environment
variable (``DEPLOYTOOL_SIM_FIELD_NAME``); flags win over the environment.
Faults are the exception to the naming: ``--fault`` (repeatable) and
``DEPLOYTOOL_SIM_FAULT`` (comma-separated), which add up.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploytool.sim import launch_rules
from deploytool.sim.faults import FAULT_HELP, parse_faults

ENV_PREFIX = "DEPLOYTOOL_SIM_"
FAULT_ENV = "DEPLOYTOOL_SIM_FAULT"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _opt(help_text: str, default: Any, **extra: Any) -> Any:
    """A dataclass field carrying its --help text (used to build the parser)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("use tuples for sequence defaults")
    return field(default=default, metadata={"help": help_text, **extra})


@dataclass
class SimSettings:
    """All knobs of the simulated SGLang server. Defaults match a small Qwen3-style deployment."""

    # Loopback unless told: run on its own, the simulator answers no one else (the sim profile
    # and the image pass --host 0.0.0.0, the container's port being published by compose).
    host: str = _opt(
        "Address to bind (default loopback; the container needs 0.0.0.0, which the profile passes).",
        "127.0.0.1",
    )
    port: int = _opt("TCP port to listen on (SGLang's default is 30000).", 30000)
    served_model_name: str = _opt("Model id reported by /v1/models and in every response.", "sim-model")
    model_path: str = _opt(
        "Value reported as model_path/tokenizer_path (nothing is loaded).", "deploytool/sim-model"
    )
    load_seconds: float = _opt(
        "Simulated weight loading: nothing listens on the port for this long (SGLang starts its HTTP "
        "server only once the scheduler is ready, sglang/srt/entrypoints/http_server.py).",
        0.0,
    )
    startup_seconds: float = _opt(
        "Simulated warm-up after loading: /health answers 503 with an empty body until it has passed.", 2.0
    )
    keep_alive_seconds: float = _opt(
        "Idle keep-alive of HTTP connections (uvicorn timeout_keep_alive; SGLang: SGLANG_TIMEOUT_KEEP_ALIVE, 5 s).",
        5.0,
    )
    decode_tps: float = _opt("Output tokens per second of one request.", 120.0)
    prefill_tps: float = _opt(
        "Prompt tokens per second (time to first token = queue wait + uncached prompt / this).", 20000.0
    )
    aggregate_tps: float | None = _opt(
        "Cap on total output tokens/s across running requests: each request then decodes at "
        "min(decode_tps, aggregate_tps / running). Unset: no cap.",
        None,
    )
    schedule_latency_s: float = _opt(
        "Fixed seconds between a request's admission and its prefill (a real server's tokenizing and "
        "scheduling time): part of every time to first token. Used to give clients a TTFT that does not "
        "depend on how each counts a prompt (benchmarks/agreement.py).",
        0.0,
    )
    decode_slowdown_tokens: int | None = _opt(
        "Decode slows with context: a request's speed is divided by (1 + context / this), context being its "
        "prompt plus the tokens generated so far (at this many tokens of context decode runs at half speed). "
        "Unset: decode speed does not depend on context.",
        None,
    )
    max_running_requests: int = _opt(
        "Requests decoded at once per DP rank; later ones wait in a FIFO queue. /server_info reports the "
        "flag as null unless it was given (as SGLang does) and the limit in internal_states[]."
        "effective_max_running_requests_per_dp.",
        8,
    )
    dp_size: int = _opt(
        "Data-parallel ranks reported (one internal_states[] entry each); capacity is per rank.", 1
    )
    max_total_tokens: int = _opt(
        "KV pool size in tokens (max_total_num_tokens); a longer prompt is refused with 400.", 300000
    )
    context_length: int = _opt("Context length in tokens; a longer prompt is refused with 400.", 262144)
    chunked_prefill_size: int = _opt("Reported only (server_info).", 8192)
    tp_size: int = _opt("Reported only (server_info).", 1)
    # SGLang's server_info reports it; a profile's memory plan reads it from server.args.
    mem_fraction_static: float | None = _opt(
        "Reported (server_info), as SGLang's; with --gpu-memory-gib it sizes the KV pool.", None
    )
    vision: bool = _opt("Accept image_url content parts (--no-vision: refuse them with 400).", True)
    tools: bool = _opt(
        "Parse tool calls into tool_calls (--no-tools: the call is left as raw <tool_call> text in content, "
        "as a server started without a tool-call parser would).",
        True,
    )
    reasoning_parser: str | None = _opt(
        "Reasoning parser the simulated server runs with (qwen3, glm45, or none). Both default to thinking "
        "(reasoning_default 'enable_thinking', sglang/srt/parser/reasoning_parser.py).",
        "qwen3",
        values=("qwen3", "glm45", "none"),
    )
    tool_call_parser: str = _opt(
        "Tool-call format of the simulated model and its parser (qwen25, qwen3_coder, glm47): the streamed "
        "argument deltas follow that parser (sglang/srt/function_call/).",
        "qwen25",
        values=("qwen25", "qwen3_coder", "glm47"),
    )
    default_chat_template_kwargs: str | None = _opt(
        "JSON object merged under each request's chat_template_kwargs, as SGLang's "
        "--default-chat-template-kwargs (e.g. '{\"enable_thinking\": false}').",
        None,
    )
    thinking_default: bool | None = _opt(
        "Override of the thinking default (on/off). Unset: the reasoning parser's mode, unless "
        "--default-chat-template-kwargs says enable_thinking.",
        None,
        choices=("on", "off"),
    )
    no_reasoning_field: bool = _opt(
        "Fault-like: put the reasoning inline in content as <think>...</think> instead of reasoning_content "
        "(a misconfigured reasoning parser).",
        False,
    )
    spec_accept_length: float = _opt(
        "Average speculative accept length to report; 0 means no speculative decoding.", 0.0
    )
    speculative_algorithm: str | None = _opt(
        "Reported speculative algorithm; defaults to EAGLE when --spec-accept-length > 0.", None
    )
    speculative_num_steps: int | None = _opt(
        "Reported speculative steps; defaults to 3 when speculative decoding is on.", None
    )
    # Launch flags the speed and the pool answer to (sim/launch_rules.py, docs/sim.md "Launch flags and speed").
    speculative_num_draft_tokens: int | None = _opt(
        "Draft tokens per verify (SGLang's flag): caps the draft steps at this - 1.", None
    )
    spec_accept_rate: float = _opt(
        "Chance each draft token is accepted; > 0 turns the speculative speed rule on.", 0.0
    )
    spec_draft_cost: float = _opt("Cost of one draft step, in target decode steps (speculative rule).", 0.1)
    spec_verify_cost: float = _opt(
        "Extra step cost per draft token per running request (speculative rule).", 0.02
    )
    cuda_graph_max_bs: int | None = _opt(
        "Largest decode batch replayed as a CUDA graph; larger ones run eager. Unset: all.", None
    )
    disable_cuda_graph: bool = _opt("Run every decode batch eager (SGLang's --disable-cuda-graph).", False)
    eager_decode_factor: float = _opt(
        "Decode speed of an eager (not graphed) batch, as a fraction of a graphed one.", 1.0
    )
    gpu_memory_gib: float | None = _opt(
        "Memory rule: the card's GiB; with --mem-fraction-static it sizes the KV pool. Unset: off.", None
    )
    weights_gib: float = _opt("Memory rule: GiB of weights inside the static fraction.", 0.0)
    kv_bytes_per_token: int = _opt("Memory rule: KV bytes per token.", 65536)
    activation_gib: float | None = _opt(
        "Memory rule: GiB the slack (1 - fraction) must hold, else the start fails.", None
    )
    graph_mib_per_bs: float = _opt(
        "Memory rule: MiB each captured decode batch size's CUDA graph takes per request of "
        "its size (the slack must hold them all).",
        0.0,
    )
    chunk_mib_per_token: float = _opt(
        "Memory rule: MiB of activations per token of the largest prefill chunk "
        "(--chunked-prefill-size; the slack must hold them).",
        0.0,
    )
    gsm8k_oracle: float | None = _opt(
        "Answer GSM8K test questions from the answer key, right for this fraction (0..1) of questions. "
        "An answer key to test scoring pipelines, never a model. Unset: off.",
        None,
    )
    gsm8k_path: str | None = _opt(
        "GSM8K test.jsonl for the oracle (default: the copy shipped in deploytool/data/gsm8k/).", None
    )
    prefix_cache_block_chars: int = _opt(
        "Prefix cache granularity in characters of the serialized prompt.", 256
    )
    prefix_cache_blocks: int = _opt("Prefix cache capacity in blocks (LRU).", 16384)
    enable_cache_report: bool = _opt(
        "Report usage.prompt_tokens_details.cached_tokens (SGLang's --enable-cache-report; else it is null).",
        False,
    )
    enable_metrics: bool = _opt("Serve /metrics (SGLang's --enable-metrics; else /metrics is 404).", False)
    cached_prompt_fraction: float = _opt(
        "Test option: count this fraction of every prompt as a prefix-cache hit (usage and /metrics "
        "counters), so a cold-cache gate can be seen to fail.",
        0.0,
    )
    weight_version: str = _opt("Reported weight_version (/model_info, metadata of each response).", "default")
    log_requests: bool = _opt("Log one line per request to stderr.", True)
    # access, as SGLang's --api-key (utils/auth.py) and --config (server_args_config_parser.py).
    api_key: str | None = _opt(
        "Require `Authorization: Bearer KEY` on every route but /health*, /ready*, /metrics* (401 "
        '{"error": "Unauthorized"} otherwise), as SGLang\'s --api-key. Pass it in a --config file, not here.',
        None,
    )
    revision: str | None = _opt(
        "Reported only: the hub revision the model was asked at (SGLang's --revision).", None
    )
    faults: tuple[str, ...] = _opt("Faults to inject (see --fault).", ())
    # Which fields were set by a flag or the environment (filled by from_env_and_args): SGLang's
    # /server_info reports a flag that was not given as null (its ServerArgs default).
    given: tuple[str, ...] = field(default=(), metadata={"internal": True})

    def __post_init__(self) -> None:
        self.faults = tuple(self.faults)
        problems = []
        if self.decode_tps <= 0 or self.prefill_tps <= 0:
            problems.append("decode_tps and prefill_tps must be > 0")
        if self.aggregate_tps is not None and self.aggregate_tps <= 0:
            problems.append("aggregate_tps must be > 0 when set")
        if self.decode_slowdown_tokens is not None and self.decode_slowdown_tokens < 1:
            problems.append("decode_slowdown_tokens must be >= 1 when set")
        if self.schedule_latency_s < 0:
            problems.append("schedule_latency_s must be >= 0")
        if self.max_running_requests < 1:
            problems.append("max_running_requests must be >= 1")
        if self.max_total_tokens < 1 or self.context_length < 1:
            problems.append("max_total_tokens and context_length must be >= 1")
        if self.startup_seconds < 0:
            problems.append("startup_seconds must be >= 0")
        if self.gsm8k_oracle is not None and not 0.0 <= self.gsm8k_oracle <= 1.0:
            problems.append("gsm8k_oracle must be between 0 and 1")
        if self.prefix_cache_block_chars < 1:
            problems.append("prefix_cache_block_chars must be >= 1")
        if self.load_seconds < 0 or self.keep_alive_seconds <= 0:
            problems.append("load_seconds must be >= 0 and keep_alive_seconds > 0")
        if self.dp_size < 1:
            problems.append("dp_size must be >= 1")
        if not 0.0 <= self.cached_prompt_fraction < 1.0:
            problems.append("cached_prompt_fraction must be in [0, 1)")
        for name in ("reasoning_parser", "tool_call_parser"):
            allowed = dataclasses.fields(self)[
                [f.name for f in dataclasses.fields(self)].index(name)
            ].metadata["values"]
            if getattr(self, name) is not None and getattr(self, name) not in allowed:
                problems.append(f"{name} must be one of {', '.join(allowed)}")
        if self.reasoning_parser == "none":
            self.reasoning_parser = None
        if self.default_chat_template_kwargs is not None:
            try:
                kwargs = json.loads(self.default_chat_template_kwargs)
            except json.JSONDecodeError as exc:
                kwargs = None
                problems.append(f"default_chat_template_kwargs is not JSON: {exc}")
            if kwargs is not None and not isinstance(kwargs, dict):
                problems.append("default_chat_template_kwargs must be a JSON object")
        problems += launch_rules.problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        launch_rules.resolve(self)
        parse_faults(self.faults)  # raises ValueError on an unknown fault

    # --- derived values reported by /server_info ------------------------------------
    def reported(self, name: str) -> Any:
        """A flag as SGLang's /server_info shows it: its value when given, else null (the
        ServerArgs default; the resolved value lives elsewhere, e.g. internal_states[])."""
        value = getattr(self, name)
        default = next(f.default for f in dataclasses.fields(self) if f.name == name)
        return value if name in self.given or value != default else None

    @property
    def chat_template_defaults(self) -> dict[str, Any]:
        return json.loads(self.default_chat_template_kwargs) if self.default_chat_template_kwargs else {}

    @property
    def speculative_enabled(self) -> bool:
        return self.spec_accept_length > 0 or launch_rules.speculative_on(self)

    @property
    def reported_speculative_algorithm(self) -> str | None:
        if self.speculative_algorithm:
            return self.speculative_algorithm
        return "EAGLE" if self.speculative_enabled else None

    @property
    def reported_speculative_num_steps(self) -> int | None:
        if self.speculative_num_steps is not None:
            return self.speculative_num_steps
        return 3 if self.speculative_enabled else None

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["faults"] = list(self.faults)
        data.pop("given", None)
        return data

    # --- construction from the outside world ------------------------------------------
    @classmethod
    def from_env_and_args(
        cls, argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
    ) -> SimSettings:
        """Defaults, overridden by DEPLOYTOOL_SIM_* env vars, overridden by flags.

        ``argv=None`` reads no flags (not sys.argv) so library callers get env + defaults.
        Bad values exit through argparse (status 2) with a message naming the flag.
        """
        env = os.environ if env is None else env
        parser = build_parser()
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name == "faults" or f.metadata.get("internal"):
                continue
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                try:
                    values[f.name] = _convert(f, raw)
                except ValueError as exc:
                    parser.error(f"{ENV_PREFIX + f.name.upper()}={raw!r}: {exc}")
        env_faults = [s.strip() for s in env.get(FAULT_ENV, "").split(",") if s.strip()]

        args = parser.parse_args(merge_config_file(list(argv or []), parser))
        for name, value in vars(args).items():
            if name != "fault" and value is not None:
                values[name] = value
        values["faults"] = tuple(env_faults + list(args.fault or []))
        values["given"] = tuple(sorted(k for k in values if k not in ("faults",)))
        try:
            return cls(**values)
        except ValueError as exc:
            parser.error(str(exc))
            raise  # unreachable: parser.error exits


def merge_config_file(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """`--config FILE.yaml`, as SGLang 0.5.23 reads it (utils/server_args_config_parser.py):
    each key becomes --key value (true: a bare flag), placed before the command line so that
    the command line wins; one config file only, and it must be YAML."""
    if "--config" not in argv:
        return argv
    at = argv.index("--config")
    if argv.count("--config") > 1 or at == len(argv) - 1:
        parser.error("--config: give exactly one YAML file")
    path = argv[at + 1]
    if not path.lower().endswith((".yaml", ".yml")):
        parser.error(f"--config {path}: Config file must be YAML format")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        parser.error(f"--config {path}: {exc.strerror}")
    try:
        import yaml  # not in the simulator's image: deploytool writes the file as JSON, which is YAML too

        data = yaml.safe_load(text) or {}
    except ImportError:
        import json

        try:
            data = json.loads(text or "{}")
        except ValueError as exc:
            parser.error(f"--config {path}: without PyYAML the simulator reads JSON-form YAML only ({exc})")
    if not isinstance(data, dict):
        parser.error(f"--config {path}: Config file must contain a dictionary at root level")
    extra: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            extra.append(flag)
        elif value is not False and value is not None:
            extra += [flag, str(value)]
    return extra + argv[:at] + argv[at + 2 :]


def _field_type(f: dataclasses.Field) -> str:
    """The base type name of a field ('int', 'float', 'str', 'bool'), ignoring '| None'."""
    return str(f.type).replace(" | None", "").strip()


def _parse_bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError("expected one of 1/0, true/false, yes/no, on/off")


def _convert(f: dataclasses.Field, raw: str) -> Any:
    kind = _field_type(f)
    if raw.strip().lower() in {"none", "null"} and "None" in str(f.type):
        return None
    if kind == "bool":
        return _parse_bool(raw)
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    return raw


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m deploytool.sim",
        description=(
            "deploytool's reference runtime: a SIMULATOR of an SGLang server, NOT a model. It speaks "
            "SGLang's OpenAI-compatible wire format and answers by documented rules (docs/sim.md). "
            f"Every flag can also be set as {ENV_PREFIX}<FLAG_NAME> in the environment."
        ),
    )
    for f in dataclasses.fields(SimSettings):
        if f.name == "faults" or f.metadata.get("internal"):
            continue
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{f.metadata['help']} (default: {_show_default(f.default)})"
        kind = _field_type(f)
        if "choices" in f.metadata:  # on/off switches read as a person says them: --thinking-default on
            parser.add_argument(
                flag, dest=f.name, type=_on_off, metavar="{on,off}", default=None, help=help_text
            )
        elif f.name == "no_reasoning_field":
            parser.add_argument(flag, dest=f.name, action="store_true", default=None, help=help_text)
        elif kind == "bool":
            parser.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            parser.add_argument(
                flag,
                dest=f.name,
                type={"int": int, "float": float}.get(kind, str),
                default=None,
                help=help_text,
            )
    parser.add_argument("--fault", action="append", metavar="FAULT", help=FAULT_HELP)
    parser.set_defaults(fault=None)
    return parser


def _on_off(raw: str) -> bool:
    low = raw.strip().lower()
    if low not in ("on", "off"):
        raise argparse.ArgumentTypeError("expected 'on' or 'off'")
    return low == "on"


def _show_default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if value == ():
        return "none"
    return str(value)
