"""Rules across a profile's fields, checked once when it loads: each problem is the field's
location and what to do, so the store reports it as file:line like a schema error."""

from __future__ import annotations

import functools
import os
import re
import shlex
import stat
from collections.abc import Mapping
from pathlib import Path

from ..resources import resource
from .schema import Profile

Problem = tuple[tuple[str, ...], str]

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
# Server args that would put a key on the command line.
KEY_FLAGS = ("api-key", "admin-api-key")


def model_source_problems(profile: Profile) -> list[Problem]:
    """Model-source mistakes as (field location, what to do), checked once at profile load."""
    model = profile.model
    problems: list[Problem] = []
    if model.hub and model.host_path:
        problems.append(
            (
                ("model", "host_path"),
                "give model.hub or model.host_path, not both (set the other to null in a child profile)",
            )
        )
    elif not model.hub and not model.host_path and not profile.is_simulator and not profile.abstract:
        problems.append(
            (
                ("model",),
                "say where the weights are: model.hub: ORG/NAME (from the host's hub cache) "
                "or model.host_path: /folder/with/config.json",
            )
        )
    if model.hub and not HUB_ID.match(model.hub):
        problems.append((("model", "hub"), f"expected a hub repository id ORG/NAME, got {model.hub!r}"))
    if model.revision is not None and not model.hub:
        problems.append((("model", "revision"), "revision is for model.hub only"))
    if model.host_path and not Path(model.host_path).expanduser().is_absolute():
        problems.append(
            (("model", "host_path"), f"expected an absolute host folder, got {model.host_path!r}")
        )
    elif model.host_path and (why := host_folder_problem(model.host_path)):
        problems.append(
            (
                ("model", "host_path"),
                why + "; point model.host_path at the checkpoint's own folder (the one holding config.json)",
            )
        )
    given = profile.server.args.get("model-path")
    if given is not None and (model.hub or model.host_path):
        wanted = model.hub if model.hub else model.mount_point()
        if str(given) != wanted:
            problems.append(
                (
                    ("server", "args", "model-path"),
                    f"deploytool passes --model-path {wanted} from the model source; remove "
                    f"server.args.model-path ({given!r})",
                )
            )
    if "revision" in profile.server.args and model.hub:
        problems.append(
            (
                ("server", "args", "revision"),
                "set model.revision instead (deploytool pins the resolved commit)",
            )
        )
    return problems


# Host folders a release may never mount: the host's system (its configuration and password
# hashes, kernel and device interfaces, the runtime's sockets, root's home, binaries and
# libraries) and the container engines' and kubelet's state (other containers' files and pods'
# secrets). A read-only mount does not help: root in the container reads a root-owned file by its
# owner bits, and a socket mounted read-only still connects (docker.sock is root on the host).
SYSTEM_FOLDERS = (
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/var/run",
    "/boot",
    "/root",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/kubelet",
)


def _forms(path: str) -> set[Path]:
    """A path as written (made absolute, `..` folded) and with its links resolved."""
    written = Path(os.path.normpath(Path(path).expanduser()))
    return {written, written.resolve()}


def host_folder_problem(path: str) -> str | None:
    """Why a host folder must not be bind-mounted into a release, or None: it is `/`, or is, holds
    or lies under a system folder (compared as written and with links resolved on this host), or
    holds a socket at its top level."""
    system = {form: name for name in SYSTEM_FOLDERS for form in _forms(name)}
    for form in _forms(path):
        if form == Path("/"):
            return f"{path} is the host's root folder: mounting it gives the container the whole host"
        for folder, name in system.items():
            if form == folder or folder in form.parents:
                return (
                    f"{path} is {'' if form == folder else 'under '}the host's system folder {name}: root in "
                    "the container reads root-owned files there (/etc/shadow) and reaches its sockets"
                )
            if form in folder.parents:
                return f"{path} holds the host's system folder {name}: mounting it exposes the host's system"
    try:
        with os.scandir(Path(path).expanduser()) as entries:
            socket = next(
                (e.name for e in entries if stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode)), None
            )
    except OSError:
        socket = None  # not here (yet): the mount's own check says so
    if socket:
        return f"{path} holds the socket {socket}: a mounted socket still connects, read-only or not"
    return None


KEY_ON_COMMAND_LINE = (
    "a key on the command line shows in `docker inspect`, `ps`, compose.yaml and /server_info; "
    "remove it and set server.api_key: {env: NAME} or {file: PATH} (the secret reference)"
)


@functools.lru_cache(maxsize=1)
def parser_options() -> frozenset[str]:
    """Every option string of the pinned sglang releases' server parsers (images/sglang/
    parser-options/<version>.txt, written from the parser itself by scripts/sglang_options.py)."""
    names: set[str] = set()
    for listing in sorted(resource("images", "sglang", "parser-options").glob("*.txt")):
        names.update(
            line.strip()
            for line in listing.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        )
    return frozenset(names)


@functools.lru_cache(maxsize=1)
def _options_and_keys() -> frozenset[str]:
    """The parser's options and the key flags: every word of a profile is read against them, so
    the union is made once, not once a word."""
    return parser_options() | {f"--{k}" for k in KEY_FLAGS}


def argparse_reading(flag: str, options: frozenset[str]) -> tuple[str, ...]:
    """The options argparse (allow_abbrev, SGLang's parser) takes a long flag `--name[=value]`
    for: an option spelled exactly wins; else every option the name begins (one: argparse reads
    the flag as it; several: it refuses the command line as ambiguous); () when none."""
    name = flag.split("=", 1)[0]
    if name in options:
        return (name,)
    if not name.startswith("--") or flag == "--":
        return ()  # a single-dash word is read as short options (SGLang has none but -h); `--` ends options
    return tuple(sorted(o for o in options if o.startswith(name)))  # `--=V`: every option begins with `--`


def key_flag(token: object) -> str | None:
    """The key flag(s) a launch argv item is in any spelling SGLang's parser takes, or None:
    `--api-key`, `--api-key=VALUE`, any abbreviation argparse resolves to it (`--api-ke`, `--ap`,
    `--adm`), one it would refuse as ambiguous between a key flag and others (`--a`), and, to be
    safe, the spellings a hand might slip into (`--api_key`, `API-KEY`, an args key without its
    dashes, extra dashes)."""
    if not isinstance(token, str):
        return None
    keys = {f"--{k}" for k in KEY_FLAGS}
    options = _options_and_keys()
    read = set(argparse_reading(token, options))
    name = token.split("=", 1)[0].strip().lstrip("-").replace("_", "-").lower()
    if name:
        read |= set(argparse_reading(f"--{name}", options))
    hit = sorted(read & keys)
    return " or ".join(k[2:] for k in hit) if hit else None


def key_problem(token: str) -> str:
    """Why the argv item `token` is refused: how SGLang's parser reads it, then the rule."""
    flag = token.split("=", 1)[0] or token
    read = argparse_reading(token, _options_and_keys())
    if len(read) == 1 and read[0] == flag:
        return KEY_ON_COMMAND_LINE
    if len(read) == 1:
        return (
            f"SGLang's parser reads {flag!r} as {read[0]} (argparse takes an unambiguous abbreviation): "
            + KEY_ON_COMMAND_LINE
        )
    if len(read) > 1:
        keys = [r for r in read if r[2:] in KEY_FLAGS]
        return (
            f"SGLang's parser would refuse {flag!r} as ambiguous ({len(read)} options begin so, "
            f"{' and '.join(keys)} among them); a key flag is refused in any spelling: " + KEY_ON_COMMAND_LINE
        )
    spelled = " or ".join(f"--{k}" for k in (key_flag(token) or "").split(" or "))
    return f"{flag!r} is a spelling of {spelled}: " + KEY_ON_COMMAND_LINE


def words(item: object) -> list[str]:
    """The words a shell would make of an argv item or environment value (`sh -c "exec python
    --api-key K"` hides a flag inside one item): shlex's split, whitespace when it cannot split."""
    if not isinstance(item, str):
        return []
    try:
        return shlex.split(item)
    except ValueError:  # an unclosed quote: the shell would refuse it, but refuse a key in it anyway
        return [word.strip("'\"") for word in item.split()]


def key_word(item: object) -> str | None:
    """The first word of `item` that is a key flag in any spelling, or None. A word is a flag
    only when it starts with a dash."""
    return next((w for w in words(item) if w.startswith("-") and key_flag(w) is not None), None)


def launch_argv_problems(
    command: list[str], args: Mapping[str, object], env: Mapping[str, str] | None = None
) -> list[Problem]:
    """One rule over a release's final launch argv: every word of its command, then its flags
    (server.args and those the model source adds), then the words of its environment values (a
    shell wrapper expands `$VAR` into the command line, and the environment shows in compose.yaml
    and `docker inspect` as much as the argv). A key flag anywhere is refused, whatever its spelling."""
    problems: list[Problem] = []
    for i, token in enumerate(command):
        if found := key_word(token):
            problems.append((("server", "command", str(i)), key_problem(found)))
    problems += flag_problems(args, ("server", "args"))
    for name, value in (env or {}).items():
        if found := key_word(value):
            problems.append((("server", "env", name), key_problem(found)))
    return problems


def flag_problems(
    args: Mapping[str, object], where: tuple[str, ...], *, searched: bool = False
) -> list[Problem]:
    """The key rule over flags given as a mapping (server.args; with `searched`, tune.flags, whose
    values are the lists a search tries): a key flag as a name, or a flag among the values."""
    problems: list[Problem] = []
    for key, value in args.items():
        flag = key if key.startswith("-") else f"--{key}"  # as args_to_argv writes it
        if key_flag(key) and (searched or value not in (None, False)):
            problems.append(((*where, key), key_problem(flag)))
            continue
        found = [w for v in (value if isinstance(value, list) else [value]) if (w := key_word(v))]
        if found:
            problems.append(((*where, key), key_problem(found[0])))
    return problems


def secret_problems(profile: Profile) -> list[Problem]:
    """Secret mistakes as (field location, what to do), checked once at profile load."""
    problems: list[Problem] = launch_argv_problems(
        profile.server.command, profile.launch_args(), profile.server.env
    )
    searched = profile.tune.get("flags")  # every value a tune search tries lands on a command line too
    if isinstance(searched, dict):
        problems += flag_problems({str(k): v for k, v in searched.items()}, ("tune", "flags"), searched=True)
    if profile.server.api_key is not None and profile.server.args.get("config") not in (None, False):
        problems.append(
            (
                ("server", "args", "config"),
                "deploytool passes the API key through SGLang's --config (one file only); "
                "move these options into server.args",
            )
        )
    if profile.server.api_key is not None:
        # SGLang 0.5.23 refuses a key in these modes: entrypoints/http_server.py init_multi_tokenizer
        # asserts "API key is not supported in multi-tokenizer mode"; arg_groups/serving_hook.py
        # rejects --grpc-port with --api-key.
        workers = profile.server.args.get("tokenizer-worker-num")
        if isinstance(workers, int) and not isinstance(workers, bool) and workers > 1:
            problems.append(
                (
                    ("server", "args", "tokenizer-worker-num"),
                    "SGLang 0.5.23 does not support an API key with more than one tokenizer worker; "
                    "drop server.api_key or set tokenizer-worker-num: 1",
                )
            )
        if profile.server.args.get("grpc-port") not in (None, False):
            problems.append(
                (
                    ("server", "args", "grpc-port"),
                    "SGLang 0.5.23 refuses --grpc-port together with an API key; drop one of them",
                )
            )
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if name in profile.server.env:
            problems.append(
                (
                    ("server", "env", name),
                    "a token in the profile lands in compose.yaml and `docker inspect`; "
                    "set secrets.hf_token: {env: HF_TOKEN} or {file: PATH} instead",
                )
            )
    return problems
