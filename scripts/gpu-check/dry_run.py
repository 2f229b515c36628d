"""The harness's dry run, on the build machine (no GPU, no Python 3.12 needed): for each plan,
the launch command drive.py would run, each flag checked against the release's own
`sglang/srt/server_args.py` (read with ast, never imported: its ServerArgs fields are the CLI
flags), the model folder loaded with transformers when it is installed, and the plan-memory
command the GPU run records beside the server's figures. For the patched plan: the patches
(PATCH_DIR, default the release's series in images/sglang/patches/), applied twice to copies of
the overlay as drive.py applies them, with the overlay's files checked unchanged after.

    python dry_run.py --site OVERLAY_SITE --models MODELS_DIR [--plan dense ...]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import sys
import tempfile
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


def release_of(harness: Path) -> str:
    """The sglang release the harness profiles pin (gpu-check-base's image.runtime_version)."""
    for line in (harness / "profiles" / "gpu-check-base.yaml").read_text().splitlines():
        if line.strip().startswith("runtime_version:"):
            return line.split(":", 1)[1].strip().strip("\"'")
    raise SystemExit("gpu-check-base.yaml names no image.runtime_version")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--site", type=Path, required=True, help="the unpacked overlay (sglang/srt/server_args.py)"
    )
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--plan", action="append")
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    import drive

    # the series build.sh would carry: the release's own, beside the profiles' runtime_version
    os.environ.setdefault(
        "PATCH_DIR", str(HERE.parents[1] / "images" / "sglang" / "patches" / release_of(HERE))
    )

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
            text = tok.apply_chat_template(
                [{"role": "user", "content": "hi"}],
                tokenize=False,
                add_generation_prompt=True,
                enable_thinking=False,
            )
            loaded = f"{type(cfg).__name__}, vocab {len(tok)}, template ok ({text[-30:]!r})"
        except ImportError:
            pass
        names = drive.patch_names(drive.patch_dir()) if spec.get("patch") else None
        line = {
            "plan": name,
            "launch": " ".join(argv[1:]),
            "unknown_flags": unknown,
            "model": loaded,
            "plan_memory": " ".join(drive.plan_memory_args(spec, folder, None, names, [])),
        }
        if spec.get("patch"):
            line["patches"] = patched_twice(a.site, names or [])
            bad += not line["patches"]["applied"]
        print(json.dumps(line))
        bad += bool(unknown)
    return 1 if bad else 0


def patched_twice(site: Path, names: list[str]) -> dict:
    """The patches applied as drive.py applies them, twice (a second call on a warm machine
    starts from the stock overlay again), and the overlay's own files unchanged after."""
    import drive
    from overlay_patches import apply_to_copy, touched

    folder = drive.patch_dir()
    files = sorted(
        {
            rel
            for n in names
            if (folder / n).is_file()
            for strip in range(4)
            for rel in touched(folder / n, strip)
            if (site / rel).is_file()
        }
    )
    before = {rel: hashlib.sha256((site / rel).read_bytes()).hexdigest() for rel in files}
    with tempfile.TemporaryDirectory(prefix="gpu-check-dry-") as tmp:
        runs = [apply_to_copy(site, folder, names, Path(tmp) / "site-patched") for _ in range(2)]
    after = {rel: hashlib.sha256((site / rel).read_bytes()).hexdigest() for rel in files}
    return {
        "folder": str(folder),
        "names": names,
        "applied": all(r["applied"] for r in runs) and before == after,
        "runs": [{d["patch"]: d["rc"] for d in r.get("patches", [])} or r.get("why") for r in runs],
        "overlay_unchanged": before == after,
        "files": files,
    }


if __name__ == "__main__":
    sys.exit(main())
