"""The harness's dry run, on the build machine (no GPU, no Python 3.12 needed): for each plan,
the launch command drive.py would run, each flag checked against the release's own
`sglang/srt/server_args.py` (read with ast, never imported: its ServerArgs fields are the CLI
flags), the model folder loaded with transformers when it is installed, and the plan-memory
prediction the GPU run will set beside the server's figures.

    python dry_run.py --site OVERLAY_SITE --models MODELS_DIR [--plan dense ...]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def server_flags(server_args_py: Path) -> set[str]:
    """Every --flag the release's ServerArgs accepts: its annotated fields (dashed) and the
    explicit option strings its parser adds."""
    tree = ast.parse(server_args_py.read_text())
    flags: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    flags.add("--" + item.target.id.replace("_", "-"))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--"):
            flags.add(node.value)
    return flags


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--site", type=Path, required=True, help="the unpacked overlay (sglang/srt/server_args.py)")
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--plan", action="append")
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    import drive

    flags = server_flags(a.site / "sglang" / "srt" / "server_args.py")
    bad = 0
    for name in a.plan or sorted(drive.PLANS):
        spec = drive.PLANS[name]
        argv = drive.launch_argv(spec["profile"], spec["model"], HERE.parents[1], {}, "KEY")
        unknown = [x for x in argv if x.startswith("--") and x not in flags]
        folder = a.models / spec["model"]
        loaded = "transformers not installed here"
        try:
            import transformers

            cfg = transformers.AutoConfig.from_pretrained(folder)
            tok = transformers.AutoTokenizer.from_pretrained(folder)
            text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True,
                                           enable_thinking=False)
            loaded = f"{type(cfg).__name__}, vocab {len(tok)}, template ok ({text[-30:]!r})"
        except ImportError:
            pass
        print(json.dumps({"plan": name, "launch": " ".join(argv[1:]), "unknown_flags": unknown, "model": loaded}))
        bad += bool(unknown)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
