"""Every candidate's launch flags, checked by the runtime's own parser in one batch before
anything is planned or started: a misspelt flag or a value out of its choices stops the search
at once, naming the flag, instead of failing one start after another.

Where the parser runs: SGLang's, in the current Python environment when it holds sglang (a
`--local` search on the GPU harness), else where `profiles check` runs it (the profile's built
image, or deploytool's parser venv); the reference runtime's own settings parser for a
simulator profile. Each in a separate process: neither parser is imported into deploytool's.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from ..errors import DeploytoolError
from ..profiles import Profile, args_to_argv
from ..resources import package_dir
from .space import Candidate

_SIM_MARKER = "---deploytool-tune-simcheck---"
# Parses each argv with the reference runtime's settings parser; argparse's error text on refusal.
_SIM_CHECK = f"""
import contextlib, io, json, sys
from deploytool.sim.settings import SimSettings
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            SimSettings.from_env_and_args(argv, env={{}})
        out.append(None)
    except SystemExit:
        out.append(err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "refused")
print({_SIM_MARKER!r})
print(json.dumps(out))
"""


@dataclass
class FlagReport:
    where: str  # which parser answered, or why none did
    checked: bool
    refused: dict[str, list[str]] = field(default_factory=dict)  # candidate id -> its parser's complaints

    def as_dict(self) -> dict[str, Any]:
        return {"where": self.where, "checked": self.checked, "refused": self.refused}


def check_candidates(
    profile: Profile, cands: list[Candidate], *, local: bool, timeout: float = 600
) -> FlagReport:
    if profile.is_simulator:
        return _check_sim(cands, timeout)
    if profile.image.recipe != "sglang":
        return FlagReport(
            where=f"not checked: recipe {profile.image.recipe!r} has no parser deploytool knows",
            checked=False,
        )
    if local and importlib.util.find_spec("sglang") is not None:
        return _check_sglang_here(cands, timeout)
    from ..image import flagcheck

    try:
        results = flagcheck.check_many([c.profile for c in cands], timeout=timeout)
    except DeploytoolError as exc:
        return FlagReport(where=f"not checked: {exc.message}", checked=False)
    report = FlagReport(where=results[0].where if results else "", checked=True)
    for cand, result in zip(cands, results, strict=True):
        problems = [
            f"{f.flag} {f.given!r}: {f.status}"
            + (f" ({f.message})" if f.message else "")
            + (f"; did you mean {', '.join(f.suggestions)}" if f.suggestions else "")
            for f in result.failures
        ]
        if result.parser_error:
            problems.append(result.parser_error)
        if problems:
            report.refused[cand.id] = problems
    return report


def _check_sim(cands: list[Candidate], timeout: float) -> FlagReport:
    argvs = [args_to_argv(c.profile.server.args) for c in cands]
    # the probe answers once, with one refusal (or null) per candidate
    answers = _run([sys.executable, "-c", _SIM_CHECK, json.dumps(argvs)], _SIM_MARKER, timeout)[0]
    report = FlagReport(where="the reference runtime's settings parser", checked=True)
    for cand, answer in zip(cands, answers, strict=True):
        if answer:
            report.refused[cand.id] = [answer]
    return report


def _check_sglang_here(cands: list[Candidate], timeout: float) -> FlagReport:
    from ..image.flagcheck import FAILING, flag_groups, unset_flags
    from ..image.in_image.flagprobe import MARKER

    probe = (package_dir() / "image" / "in_image" / "flagprobe.py").read_text()
    # the server will read the host folder itself (tune/local.py), and so does the parser here
    profiles = [_host_model(c.profile) for c in cands]
    requests = [
        {
            "groups": flag_groups(p),
            "names_only": unset_flags(p),
            "resolve": False,
            "model_path": str(p.launch_args().get("model-path") or p.model.path),
        }
        for p in profiles
    ]
    answers = _run([sys.executable, "-c", probe, json.dumps(requests)], MARKER, timeout)
    report = FlagReport(where=f"sglang's parser in this Python environment ({sys.executable})", checked=True)
    for cand, answer in zip(cands, answers, strict=True):
        problems = [
            f"{f['flag']} {f.get('given')!r}: {f['status']}"
            + (f" ({f['message']})" if f.get("message") else "")
            for f in answer.get("findings", [])
            if f["status"] in FAILING
        ]
        problems += [answer[k] for k in ("parser_error", "probe_error") if answer.get(k)]
        if problems:
            report.refused[cand.id] = problems
    return report


def _host_model(profile: Profile) -> Profile:
    if not profile.model.host_path:
        return profile
    return profile.model_copy(
        update={"model": profile.model.model_copy(update={"path": profile.model.host_path})}
    )


def _run(argv: list[str], marker: str, timeout: float) -> list[Any]:
    """Every answer the probe printed (at least one)."""
    from ..errors import CouldNotRun
    from ..image.flagcheck import marked_answers

    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CouldNotRun(f"the flag check did not answer within {timeout:g} s") from None
    answers = marked_answers(proc.stdout, marker)
    if not answers:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise CouldNotRun(f"the flag check could not run (exit {proc.returncode}):\n{tail}")
    return answers
