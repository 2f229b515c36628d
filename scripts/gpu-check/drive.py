"""The GPU side of the acceptance harness: for each named plan, start a real SGLang server from a
harness profile (the launch command is the profile's server.args through deploytool's own
args_to_argv) and run deploytool against it: plan-memory before the start, qualify --url started
before the server listens, the fixtures (record.py), a client that leaves, bench, deploytool
bench beside sglang.bench_serving (agree.py), the NVML dump. Every step has a time bound and
the whole run a deadline, so the results always come back; each step's outcome is in
summary.json.

    python drive.py --plan dense [--plan hybrid-mtp ...] --out DIR --deadline EPOCH
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

from overlay_patches import apply_to_copy, patch_names
from record import Recorder, abort_checks, record_all
from server import LoadWatch, Server, stop_all

W = Path(os.environ.get("GPU_CHECK_WORK", "/tmp/gpu-check"))
HARNESS = Path(__file__).resolve().parent
PROFILES = HARNESS / "profiles"
URL = "http://127.0.0.1:30000"

# What each plan starts and runs. `steps` run in this order after the server is ready.
PLANS = {
    "dense": {
        "profile": "gpu-check-qwen3-tiny",
        "model": "qwen3-tiny",
        "api_key": True,
        "steps": ["record", "abort", "agree_c1", "agree", "bench", "bench_long", "bench_agentic", "gsm8k"],
        "fallback_args": {"disable-decode-cuda-graph": True, "grammar-backend": "none"},
    },
    "hybrid-mtp": {
        "profile": "gpu-check-qwen36-tiny-mtp",
        "model": "qwen36-tiny",
        "api_key": False,
        "steps": ["record", "bench"],
        "fallback_args": {"disable-decode-cuda-graph": True, "grammar-backend": "none"},
    },
    "a3b": {
        "profile": "gpu-check-qwen36-35b-a3b-mtp",
        "model": "qwen36-35b-a3b-shape",
        "api_key": False,
        "steps": ["record_info", "bench"],
        "fallback_args": None,
    },
    # tune's winner on the 35B shapes, measured by deploytool bench and sglang.bench_serving on
    # the one server at the load tune scored it on: 32 users, 128 prompt and 128 output tokens
    "a3b-tuned": {
        "profile": "gpu-check-qwen36-35b-a3b-mtp-tuned",
        "model": "qwen36-35b-a3b-shape",
        "api_key": False,
        "steps": ["record_info", "agree_tuned"],
        "fallback_args": None,
    },
    # the draft-sharing patch's proof: the same launch with PATCH_DIR's patches applied to a
    # copy of the overlay, planned with those patches
    "a3b-patched": {
        "profile": "gpu-check-qwen36-35b-a3b-mtp",
        "model": "qwen36-35b-a3b-shape",
        "api_key": False,
        "patch": True,
        "no_qualify": True,
        "steps": ["record_info"],
        "fallback_args": None,
    },
}


# agree.py's workload for each agreement step (its defaults: 8 in flight, 64 requests, 256 + 256)
AGREE_WORKLOADS = {
    "agree": [],
    "agree_c1": ["--concurrency", "1", "--requests", "16", "--small", "4"],
    # a 35B MoE streams at about 50 tok/s a user: 32 in flight is the server's pace, not a client's
    "agree_tuned": [
        "--concurrency",
        "32",
        "--requests",
        "96",
        "--small",
        "32",
        "--prompt-tokens",
        "128",
        "--output-tokens",
        "128",
    ],
}


class Run:
    def __init__(self, out: Path, deadline: float):
        self.out, self.deadline = out, deadline
        self.summary: dict = {"plans": {}, "started": time.time()}
        self.log = open(out / "drive.log", "a")  # noqa: SIM115  (the run's log, open for the whole drive)

    def left(self) -> float:
        return self.deadline - time.time()

    def say(self, text: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')} {self.left():5.0f}s left] {text}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def save(self) -> None:
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1, default=str))


def env_for(site: Path, dt: Path, key: str | None) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": f"{HARNESS}:{dt}/src:{dt}/site:{site}",
        "DEPLOYTOOL_RESOURCES": str(dt),
        "DEPLOYTOOL_HOME": str(W / "deploytool-home"),
        "PYTHONUNBUFFERED": "1",
    }
    if key:
        env["DEPLOYTOOL_API_KEY"] = key
        env["OPENAI_API_KEY"] = key
    return env


def cli(run: Run, name: str, args: list[str], env: dict, limit: float, plan_out: Path) -> dict:
    """One deploytool command, bounded; stdout and stderr kept; JSON stdout parsed when it is."""
    limit = max(5.0, min(limit, run.left() - 25))
    argv = [sys.executable, "-m", "deploytool", *args]
    run.say(f"{name}: deploytool {' '.join(args)} (limit {limit:.0f}s)")
    t = time.monotonic()
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=limit)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = (
            "timeout",
            (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""),
            (exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else (exc.stderr or ""),
        )
    (plan_out / f"{name}.stdout").write_text(out)
    (plan_out / f"{name}.stderr").write_text(err[-200000:])
    result = {"rc": rc, "seconds": round(time.monotonic() - t, 1)}
    try:
        result["json"] = json.loads(out)
    except ValueError:
        result["stdout_tail"] = out[-1500:]
    run.say(f"{name}: rc={rc} in {result['seconds']}s")
    return result


def launch_argv(profile_name: str, model: str, dt: Path, extra: dict, key: str | None) -> list[str]:
    sys.path[:0] = [p for p in (f"{dt}/src", f"{dt}/site", str(dt.parent / "site")) if p not in sys.path]
    os.environ["DEPLOYTOOL_RESOURCES"] = str(dt)
    from deploytool.profiles import ProfileStore, args_to_argv

    profile = ProfileStore([PROFILES]).get(profile_name)
    args = {**profile.server.args, **extra}
    argv = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(W / "models" / model),
        *args_to_argv(args),
    ]
    if key:
        argv += ["--api-key", key]
    return argv


def redact_file(path: Path, key: str | None) -> None:
    if key and path.exists():
        path.write_text(path.read_text(errors="replace").replace(key, "<redacted>"))


def memory_lines(log: Path) -> list[str]:
    """SGLang's own memory log lines (weights loaded, KV pool allocated, graph capture)."""
    keep = re.compile(
        r"Load weight|KV Cache is allocated|Memory pool end|max_total_num_tokens|mem usage|avail mem|"
        r"Capture cuda graph|mamba|Mamba|max_running_requests|token_capacity",
        re.I,
    )
    try:
        return [
            line.rstrip()[:400] for line in log.read_text(errors="replace").splitlines() if keep.search(line)
        ][:80]
    except OSError:
        return []


def do_plan(run: Run, name: str, site: Path, dt: Path, gpu_uuid: str | None) -> None:
    spec = PLANS[name]
    plan_out = run.out / name
    plan_out.mkdir(parents=True, exist_ok=True)
    res: dict = {"profile": spec["profile"], "steps": {}}
    run.summary["plans"][name] = res
    key = secrets.token_urlsafe(24) if spec.get("api_key") else None
    model_dir = W / "models" / spec["model"]
    pd = ["--profiles-dir", str(PROFILES)]
    names = patch_names(patch_dir()) if spec.get("patch") else None

    # the card as the server will find it
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.total,memory.used,memory.free", "--format=csv"],
        capture_output=True,
        text=True,
    )
    (plan_out / "nvidia-smi-before.csv").write_text(smi.stdout + smi.stderr)
    # 1. the plan, before anything starts
    res["steps"]["plan_memory"] = cli(
        run,
        "plan-memory",
        plan_memory_args(spec, model_dir, gpu_uuid, names, pd),
        env_for(site, dt, key),
        60,
        plan_out,
    )

    if spec.get("patch"):
        res["patch"] = apply_patches(run, site, names or [], plan_out)
        if not res["patch"].get("applied"):
            res["error"] = "the patch did not apply: not started"
            run.save()
            return
        site = Path(res["patch"]["site"])  # this plan's own copy: the overlay stays stock
    env = env_for(site, dt, key)
    attempts = [{}, spec.get("fallback_args") or None]
    server = None
    for extra in [a for a in attempts if a is not None]:
        if run.left() < 120:
            res["error"] = "no time left to start the server"
            break
        argv = launch_argv(spec["profile"], spec["model"], dt, extra, key)
        res["launch"] = " ".join(a if a != key else "<redacted>" for a in argv[1:])
        log = plan_out / "server.log"
        server = Server(argv, log, {**env, "PYTHONPATH": str(site)})
        # qualify first: it must meet the server while nothing listens
        qualify_proc = None
        if not spec.get("no_qualify"):
            q_args = [
                sys.executable,
                "-m",
                "deploytool",
                "qualify",
                "--url",
                URL,
                "--profile",
                spec["profile"],
                *pd,
                "--report",
                str(plan_out / "qualify"),
                "--json",
                "--no-progress",
            ]
            # the files are the child's stdout and stderr for its whole life: they close when it exits
            qualify_proc = subprocess.Popen(
                q_args,
                env=env,
                stdout=open(plan_out / "qualify.stdout", "w"),  # noqa: SIM115
                stderr=open(plan_out / "qualify.stderr", "w"),  # noqa: SIM115
            )
            run.say(f"qualify started (pid {qualify_proc.pid}) before the server")
            time.sleep(2)
        t0 = time.monotonic()
        watch = LoadWatch(t0, {"Authorization": f"Bearer {key}"} if key else {})
        watch.start()
        run.say(f"launch: {res['launch'][:300]}")
        server.start()
        ready, took, why = server.wait_ready(min(540, run.left() - 60))
        watch.stop()
        watch.join(5)
        res["ready"], res["ready_after_s"], res["ready_detail"] = ready, round(took, 1), why
        (plan_out / "loading.json").write_text(
            json.dumps({"events": watch.events, "first_ready": watch.first_ready}, indent=1).replace(
                key or "\0", "<redacted>"
            )
        )
        res["memory_log"] = memory_lines(log)
        run.say(f"server ready={ready} after {took:.0f}s ({why})")
        if ready:
            res["attempt_args"] = extra
            break
        if qualify_proc:
            qualify_proc.kill()
        server.stop()
        redact_file(log, key)
        shutil.copy(log, plan_out / f"server-failed-{len(res.get('failed_attempts', []))}.log")
        res.setdefault("failed_attempts", []).append(
            {"args": extra, "why": why, "log_tail": log.read_text(errors="replace")[-4000:]}
        )
        log.unlink()
        run.save()
    else:
        pass
    if not res.get("ready"):
        run.save()
        return

    rec = Recorder(plan_out / "fixtures", served_name(spec["profile"], dt), key)
    try:
        if qualify_proc:
            try:
                qualify_proc.wait(timeout=max(10, min(420, run.left() - 150)))
            except subprocess.TimeoutExpired:
                qualify_proc.terminate()
                qualify_proc.wait(15)
                res["qualify_cut"] = "stopped by the harness's deadline"
            res["steps"]["qualify"] = {"rc": qualify_proc.returncode}
            run.say(f"qualify rc={qualify_proc.returncode}")
            redact_file(plan_out / "qualify.stdout", key)
        for step in spec["steps"]:
            if run.left() < 60:
                res["steps"][step] = {"skipped": "deadline"}
                continue
            t = time.monotonic()
            try:
                res["steps"][step] = run_step(run, step, spec, rec, env, plan_out, model_dir, pd)
            except Exception as exc:
                res["steps"][step] = {
                    "error": f"{type(exc).__name__}: {exc}",
                    "trace": traceback.format_exc()[-3000:],
                }
            res["steps"][step]["seconds"] = round(time.monotonic() - t, 1)
            run.say(f"step {step}: {str(res['steps'][step])[:300]}")
            run.save()
        rec.get("metrics_after", "/metrics")
        rec.get("server_info_after", "/server_info")
        (plan_out / "fixtures" / "metrics_before.json").write_text(
            json.dumps(
                {
                    "request": {"method": "GET", "path": "/metrics"},
                    "status": (watch.first_ready or {}).get("metrics_status"),
                    "body": (watch.first_ready or {}).get("metrics", ""),
                },
                indent=1,
            )
        )
    finally:
        res["server_exit"] = server.stop()
        redact_file(plan_out / "server.log", key)
        res["memory_log"] = memory_lines(plan_out / "server.log")
        for f in (plan_out / "fixtures").glob("*.json"):
            redact_file(f, key)
        run.save()


def patch_dir() -> Path:
    return Path(os.environ.get("PATCH_DIR", W / "patches"))


def plan_memory_args(
    spec: dict, model_dir: Path, gpu_uuid: str | None, names: list[str] | None, pd: list[str]
) -> list[str]:
    """plan-memory for the plan's launch; a patched plan names its patches (`--patches`), so the
    recorded plan is the patched one, not the profile's stock one."""
    args = ["plan-memory", "--profile", spec["profile"], "--checkpoint", str(model_dir), "--json", *pd]
    if gpu_uuid:
        args += ["--gpu", gpu_uuid]
    if names is not None:
        args += ["--patches", ",".join(names) or "none"]
    return args


def apply_patches(run: Run, site: Path, names: list[str], plan_out: Path) -> dict:
    """PATCH_DIR's patches (in its `series` order) applied to a fresh copy of the overlay
    (overlay_patches.py): the overlay itself stays stock for every other plan and call."""
    result = apply_to_copy(site, patch_dir(), names, W / "site-patched")
    (plan_out / "patches.json").write_text(json.dumps(result, indent=1))
    for d in result.get("patches", []):
        run.say(f"patch {d['patch']}: {d['rc']}")
    if "why" in result:
        run.say(f"patches: {result['why']}")
    return result


def served_name(profile_name: str, dt: Path) -> str:
    from deploytool.profiles import ProfileStore

    return ProfileStore([PROFILES]).get(profile_name).model.served_name


def run_step(
    run: Run, step: str, spec: dict, rec: Recorder, env: dict, plan_out: Path, model_dir: Path, pd: list[str]
) -> dict:
    profile = spec["profile"]
    context = json.loads((model_dir / "config.json").read_text()).get("max_position_embeddings")
    if step == "record":
        from deploytool.profiles import ProfileStore

        context = ProfileStore([PROFILES]).get(profile).model.context_length
        return record_all(rec, context)
    if step == "record_info":
        for name, path in (
            ("server_info", "/server_info"),
            ("model_info", "/model_info"),
            ("v1_models", "/v1/models"),
            ("metrics", "/metrics"),
        ):
            rec.get(name, path)
        rec.post("chat_plain", "/v1/chat/completions", rec.chat(max_tokens=16))
        return {"recorded": len(rec.index)}
    if step == "abort":
        return abort_checks(rec)
    if step in ("bench", "bench_long", "bench_agentic"):
        workload = {"bench": "table", "bench_long": "long-context", "bench_agentic": "agentic"}[step]
        args = [
            "bench",
            "--url",
            URL,
            "--profile",
            profile,
            *pd,
            "--workload",
            workload,
            "--repeats",
            "1",
            "--report",
            str(plan_out / step),
            "--json",
            "--ready-timeout",
            "30",
        ]
        if step != "bench":
            args.append("--quick")
        return cli(run, step, args, env, 170, plan_out)
    if step == "gsm8k":
        return cli(
            run,
            "qualify-gsm8k",
            [
                "qualify",
                "--url",
                URL,
                "--profile",
                profile,
                *pd,
                "--suite",
                "gsm8k",
                "--limit",
                "16",
                "--set",
                "gsm8k.thinking=[false]",
                "--set",
                "gsm8k.lmeval_max_tokens=32",
                "--set",
                "gsm8k.concurrency=16",
                "--report",
                str(plan_out / "qualify-gsm8k"),
                "--json",
                "--no-progress",
            ],
            env,
            90,
            plan_out,
        )
    if step in AGREE_WORKLOADS:
        # at 8 in flight a tiny model streams faster than bench_serving's one Python process can
        # read (it saturates a core); one in flight is where the server, not a client, sets the pace
        out = plan_out / (
            "agreement.json" if step == "agree" else f"agreement-{step.removeprefix('agree_')}.json"
        )
        workload = AGREE_WORKLOADS[step]
        argv = [
            sys.executable,
            str(HARNESS / "agree.py"),
            "--url",
            URL,
            "--model",
            rec.model,
            "--tokenizer",
            str(model_dir),
            "--out",
            str(out),
            *workload,
        ]
        t = time.monotonic()
        proc = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=max(30, min(200, run.left() - 40))
        )
        (plan_out / f"{step}.stdout").write_text(proc.stdout)
        (plan_out / f"{step}.stderr").write_text(proc.stderr[-100000:])
        result = {"rc": proc.returncode, "seconds": round(time.monotonic() - t, 1)}
        if out.exists():
            data = json.loads(out.read_text())
            result.update(summary=data["summary"], ratio=data["ratio_sglang_over_deploytool"])
        else:
            result["stderr_tail"] = proc.stderr[-1500:]
        return result
    raise ValueError(f"unknown step {step}")


def host_facts(run: Run, env: dict) -> None:
    facts = run.out / "host"
    facts.mkdir(exist_ok=True)
    for name, cmd in (
        ("nvidia-smi-q.xml", ["nvidia-smi", "-q", "-x"]),
        ("nvidia-smi-topo.txt", ["nvidia-smi", "topo", "-m"]),
        ("nvidia-smi.txt", ["nvidia-smi"]),
        ("nvml.json", [sys.executable, str(HARNESS / "nvml_dump.py")]),
        (
            "gpus.json",
            [sys.executable, "-m", "deploytool", "gpus", "--json", "--profiles-dir", str(PROFILES)],
        ),
    ):
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
            (facts / name).write_text(proc.stdout or proc.stderr)
        except Exception as exc:
            (facts / name).write_text(f"{type(exc).__name__}: {exc}")


def gpu_uuid(env: dict) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
        return out[0] if out else None
    except Exception:
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", action="append", required=True, choices=sorted(PLANS))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--deadline", type=float, required=True, help="epoch seconds by which everything is back")
    ap.add_argument("--site", type=Path, default=W / "site")
    ap.add_argument("--dt", type=Path, default=W / "dt")
    ap.add_argument("--host-facts", action="store_true")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    run = Run(a.out, a.deadline)
    env = env_for(a.site, a.dt, None)
    uuid = gpu_uuid(env)
    run.summary["gpu_uuid"] = uuid
    if a.host_facts:
        host_facts(run, env)
    for plan in a.plan:
        if run.left() < 150:
            run.summary["plans"][plan] = {"skipped": "deadline"}
            continue
        run.say(f"=== plan {plan}")
        try:
            do_plan(run, plan, a.site, a.dt, uuid)
        except Exception as exc:
            run.summary["plans"].setdefault(plan, {})["error"] = traceback.format_exc()[-4000:]
            run.say(f"plan {plan} failed: {exc}")
        finally:
            stop_all()
        run.save()
    run.summary["finished"] = time.time()
    run.save()


if __name__ == "__main__":
    main()
