"""Write images/sglang/parser-options/<version>.txt: every option string of the pinned sglang's
own server parser (sglang.srt.server_args: ServerArgs.add_cli_args on prepare_server_args's
parser), one a line. deploytool's key rule (deploytool.profiles.rules.key_flag) resolves a
profile's flags against it as argparse does, abbreviations included.

    python scripts/sglang_options.py 0.5.23      # made in deploytool's parser venv (flagcheck)

tests/test_key_rule_follows_sglangs_parser.py checks the shipped list against the parser itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import argparse
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
assert parser.allow_abbrev
print("\\n".join(sorted(parser._option_string_actions)))
"""


def options(python: Path) -> list[str]:
    out = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, check=True)
    return out.stdout.split()


def main() -> None:
    from deploytool.image.flagcheck import parser_venv

    version = sys.argv[1]
    names = options(parser_venv(version))
    target = Path(__file__).resolve().parents[1] / "images" / "sglang" / "parser-options" / f"{version}.txt"
    target.parent.mkdir(exist_ok=True)
    target.write_text(
        f"# Every option string of sglang {version}'s server parser (argparse, allow_abbrev on),\n"
        "# written by scripts/sglang_options.py: what the key rule resolves a flag against.\n"
        + "\n".join(names)
        + "\n"
    )
    print(f"{target}: {len(names)} options")


if __name__ == "__main__":
    main()
