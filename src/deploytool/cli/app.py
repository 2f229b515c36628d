"""The typer app and the options every command shares."""

import copy
import functools
import inspect
import json
import sys
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from .. import terminal_text
from ..files import to_jsonable
from ..redaction import scrub, scrub_all

if TYPE_CHECKING:
    from rich.console import Console

    # typer's own copy of click: the context and formatter types its groups and commands take
    from typer import _click
    from typer.core import TyperOption


def _help_flag_false(option: "TyperOption | None") -> "TyperOption | None":
    """The --help flag of a group or command, off (False) when it is not given. typer makes it
    without a default, so an absent --help is None, and typer coerces every non-bool value
    through a pydantic TypeAdapter: importing pydantic and building one adapter was a third of
    `deploytool status`'s CPU, for a flag that was not there. A bool value skips the coercion;
    the flag, its help line and what it does are the same."""
    if option is not None and option.default is None:
        option.default = False
    return option


class Group(TyperGroup):
    """A group whose subcommands may be built at their first lookup (`LazyCommands`): its
    listing in `--help` then reads each one's summary instead of building it."""

    def get_help_option(self, ctx: "_click.Context") -> "TyperOption | None":
        return _help_flag_false(super().get_help_option(ctx))

    def format_commands(self, ctx: "_click.Context", formatter: "_click.HelpFormatter") -> None:
        if not isinstance(self.commands, LazyCommands):
            return super().format_commands(ctx, formatter)
        listed = [(name, self.commands.summary(name)) for name in self.commands]
        shown = [(name, cmd) for name, cmd in listed if not cmd.hidden]
        if not shown:
            return
        # the rows TyperGroup.format_commands writes, from the same help texts
        limit = formatter.width - 6 - max(len(name) for name, _ in shown)
        with formatter.section("Commands"):
            formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in shown])


class Command(TyperCommand):
    def get_help_option(self, ctx: "_click.Context") -> "TyperOption | None":
        return _help_flag_false(super().get_help_option(ctx))


class Typer(typer.Typer):
    """deploytool's typer app and sub-apps: their groups and commands keep --help off the
    pydantic path (_help_flag_false)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=Group, **kwargs)

    def command(self, name: str | None = None, **kwargs: Any) -> Any:
        return super().command(name, cls=Command, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command line with only the command it names built. typer builds every
        command's click parameters from its signature before parsing anything (38 commands,
        a third of `deploytool --help`'s CPU), where one run needs one. What is built and how
        it parses are typer's own (typer.main.get_command_from_info, get_group_from_info)."""
        return lazy_group(self)(*args, **kwargs)


class LazyCommands(MutableMapping[str, Any]):
    """A group's subcommands (typer's click commands and groups) by name, in the order they were
    registered, each built by typer at its first lookup. `summary` is what a `--help` listing
    needs of one, without building it."""

    def __init__(self, app: typer.Typer) -> None:
        markup, short = app.rich_markup_mode, app.pretty_exceptions_short
        self._build: dict[str, Callable[[], Any]] = {}
        self._summary: dict[str, Callable[[], TyperCommand]] = {}
        for info in app.registered_commands:
            if info.name:
                name = info.name
            elif info.callback is not None:
                name = typer.main.get_command_name(info.callback.__name__)
            else:  # typer's decorator always gives one: a command without a function has no name
                raise TypeError("deploytool's commands are registered with a function")
            self._build[name] = functools.partial(
                typer.main.get_command_from_info, info, pretty_exceptions_short=short, rich_markup_mode=markup
            )
            self._summary[name] = functools.partial(_command_summary, name, info)
        for group in app.registered_groups:
            name = group.name or ""
            if not isinstance(name, str) or not name:  # a group merged into its parent: built as typer does
                raise TypeError("deploytool's sub-apps are added with a name")
            self._build[name] = functools.partial(
                typer.main.get_group_from_info,
                group,
                pretty_exceptions_short=short,
                rich_markup_mode=markup,
                suggest_commands=app.suggest_commands,
            )
            self._summary[name] = functools.partial(_group_summary, name, group)
        self._built: dict[str, Any] = {}

    def summary(self, name: str) -> Any:
        """The built command, or a bare one with the same name, help texts and flags."""
        return self._built.get(name) or self._summary[name]()

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in self._build:
                raise KeyError(name)
            self._built[name] = self._build[name]()
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._build.setdefault(name, lambda: command)
        self._summary.setdefault(name, lambda: command)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._build[name], self._summary[name]
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._build)

    def __len__(self) -> int:
        return len(self._build)


def _command_summary(name: str, info: Any) -> TyperCommand:
    # the help text as typer.main.get_command_from_info takes it
    text = inspect.cleandoc(info.help) if info.help is not None else inspect.getdoc(info.callback)
    return TyperCommand(
        name=name, help=text, short_help=info.short_help, hidden=info.hidden, deprecated=info.deprecated
    )


def _group_summary(name: str, info: Any) -> TyperCommand:
    solved = typer.main.solve_typer_info_defaults(info)
    return TyperCommand(
        name=name,
        help=solved.help,
        short_help=solved.short_help,
        hidden=solved.hidden,
        deprecated=solved.deprecated,
    )


def lazy_group(app: typer.Typer) -> TyperGroup:
    """The app's click group as typer makes it, its subcommands left to `LazyCommands`."""
    shell = copy.copy(app)
    shell.registered_commands, shell.registered_groups = [], []
    group = typer.main.get_group(shell)
    group.commands = LazyCommands(app)
    return group


app = Typer(
    name="deploytool",
    help="Take a patched SGLang runtime from source to production traffic on your own GPUs, and prove it first.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if not value:
        return
    from ..deploy.about import about

    typer.echo("\n".join(about().lines()))
    raise typer.Exit()


@app.callback()
def _global_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print deploytool's version, the SGLang releases it carries rules for and where its data is read from.",
        ),
    ] = False,
) -> None:
    pass


class LazyConsole:
    """A rich Console made at its first use: importing rich and making two consoles was a fifth
    of what `deploytool status` costs to start, and `--help`, every --json and a status with
    nothing running print through typer.echo alone. Attributes are the Console's; `.rich` is the
    Console itself, for what takes one (a Progress, a Live)."""

    def __init__(self, make: Callable[[], "Console"]) -> None:
        self._make = make
        self._console: Console | None = None

    @property
    def rich(self) -> "Console":
        if self._console is None:
            self._console = self._make()
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rich, name)


def _stdout_console() -> "Console":
    # A table piped to a file or a log keeps its columns whole (rich assumes 80 off a terminal).
    return terminal_text.console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def _stderr_console() -> "Console":
    return terminal_text.console(stderr=True, soft_wrap=True)


# soft_wrap: a message is never cut into lines at the terminal width, so logs and scripts
# that read stderr see each message whole.
console = LazyConsole(_stdout_console)  # results, on stdout
console_err = LazyConsole(_stderr_console)  # progress and messages, on stderr, so --json stays clean

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON (schema in docs/json.md).")]
ProfilesDirOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--profiles-dir",
        help="Extra folder of profile YAML files (repeatable; also DEPLOYTOOL_PROFILES_PATH).",
    ),
]
GpuOpt = Annotated[
    list[str] | None, typer.Option("--gpu", help="GPU UUID of the slot (repeat for several cards).")
]
CpuOpt = Annotated[bool, typer.Option("--cpu", help="The CPU slot (the embedded default, no GPU).")]
CpuSlotOpt = Annotated[
    str | None,
    typer.Option(
        "--cpu-slot",
        help="A further CPU slot, cpu-NAME (several reference-runtime slots side by side, each on its own --port).",
    ),
]
DrainOpt = Annotated[
    float | None,
    typer.Option(
        "--drain-timeout",
        help="Seconds a stop of the serving release waits, after the pre-stop hook, until the server reports no running and no queued request (default: the profile's health.drain_timeout, 30).",
    ),
]
HooksOpt = Annotated[
    Path | None,
    typer.Option(
        "--hooks",
        help="Folder of gateway hooks (pre-stop, post-cutover, post-rollback, on-failure; also DEPLOYTOOL_HOOKS). docs/hooks.md.",
    ),
]
TakeOverOpt = Annotated[
    bool,
    typer.Option(
        "--take-over",
        help="Act on the slot although its release was started from another state folder (another person's deploytool on this engine with the same DEPLOYTOOL_INSTANCE, or yours under another DEPLOYTOOL_HOME); refused without it.",
    ),
]
UrlOpt = Annotated[
    str | None, typer.Option("--url", help="An OpenAI-compatible endpoint, e.g. http://127.0.0.1:30000.")
]
# The profile is named the same way in every command: --profile NAME.
ProfileOpt = Annotated[
    str | None, typer.Option("--profile", help="Profile name (`deploytool profiles list`).")
]
RequiredProfileOpt = Annotated[
    str, typer.Option("--profile", help="Profile name (`deploytool profiles list`).")
]
# The key for a server started with one. A slot's release reads its own; a value on the
# command line is refused (it shows in `ps` and the shell's history).
ApiKeyFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--api-key-file",
        help="File holding the server's API key (else DEPLOYTOOL_API_KEY, else the release's own).",
    ),
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        help="Refused: a key on the command line shows in `ps`; use --api-key-file or DEPLOYTOOL_API_KEY.",
    ),
]


# How long qualify and bench wait for a server that is still loading, one option for both (qualify
# passes it on as its preflight suite's ready_timeout_s).
READY_TIMEOUT_OPTION = "--ready-timeout"
ReadyTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        READY_TIMEOUT_OPTION,
        metavar="SECONDS",
        min=0,
        help="How long to wait for a server that is still loading (refusing connections, or answering 503) "
        "before giving up as could not run (exit 6); default 1200, or the profile's "
        "qualify.preflight.ready_timeout_s. A wrong --url fails after this long.",
    ),
]


def print_json(obj: Any) -> None:
    """JSON on stdout, nothing else, for scripts."""
    typer.echo(json.dumps(scrub_all(to_jsonable(obj)), indent=2))


def json_error(
    message: str,
    hint: str | None,
    code: int,
    kind: str,
    result: object = None,
    *,
    flag: str | None = None,
    **fields: object,
) -> None:
    """An error as --json reports it, on stdout (docs/json.md); the caller still says it on stderr
    for a person watching. `fields`: keys a command keeps beside the error (`gpus`: its empty list);
    `flag`: the option whose value was refused, when one was."""
    error: dict[str, object] = {
        "message": scrub(message),
        "hint": scrub(hint or "") or hint,
        "exit_code": code,
        "kind": kind,
    }
    if flag is not None:
        error["flag"] = flag
    body: dict[str, object] = {**fields, "error": error}
    if result is not None:  # what the command got done before it failed (a rollout's slots)
        body["result"] = result
    print_json(body)


_STYLE = {
    "pass": "green",
    "ok": "green",
    "applied": "green",
    "warn": "yellow",
    "redundant": "dim",  # nosec B105: colour names of verdict words, no password
    "overridden": "yellow",
    "fail": "red",
    "failed": "red",
}


def styled(word: str) -> str:
    """A verdict word in its colour (rich markup), the same in every table."""
    return f"[{_STYLE.get(word, 'red')}]{word}[/]"


class _Verbatim:
    """The stream with every secret value scrubbed and nothing else changed."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def shown(self, text: str) -> str:
        return scrub(text)

    def write(self, text: str) -> int:
        self._raw.write(self.shown(text) if isinstance(text, str) else text)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class ScrubbedStream(_Verbatim):
    """stdout or stderr, with every secret value this process holds (and a key on a command
    line, a bearer token, a URL's credentials) replaced before it is written: container logs,
    server answers and errors pass through the commands' output (deploytool.redaction). Every
    control character but newline and tab is shown as its escape (deploytool.terminal_text):
    what a command prints came, in part, from a server, a log or a file, and the terminal must
    not act on it. `verbatim` is the same stream with secrets scrubbed and nothing escaped: for
    deploytool's rich consoles (their text is made visible before rich adds its colours) and
    `logs --raw`."""

    def __init__(self, raw: Any) -> None:
        super().__init__(raw)
        self.verbatim = _Verbatim(raw)

    def shown(self, text: str) -> str:
        return terminal_text.visible(scrub(text))
