"""First-run costs are said before they are paid: the parser environment of `profiles check`
(size, time, what is fetched, with progress per step) and an image build (`build --dry-run`:
its inputs and expected size, with no engine)."""

from __future__ import annotations

import json
import subprocess

from conftest import run_cli

from deploytool.image import parser_env


def test_the_parser_environment_is_announced_with_its_cost_before_anything_is_installed(
    tmp_path, monkeypatch, capsys
):
    events: list[str] = []
    monkeypatch.setattr(parser_env, "_say", lambda line: events.append(line))
    monkeypatch.setattr(parser_env, "sglang_wheel", lambda version, python: tmp_path / "sglang.whl")

    class Builder:
        def __init__(self, **kw):
            pass

        def create(self, folder):
            events.append("venv created")

    def pip(argv, **kw):
        if argv[1:4] == ["-m", "pip", "install"]:
            assert argv[4:6] == ["--quiet", "--no-compile"]  # what a check imports is compiled at the end
            events.append("pip " + " ".join(argv[6:]))
        else:
            events.append("import " + " ".join(argv[3:]))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(parser_env.venv, "EnvBuilder", Builder)
    monkeypatch.setattr(subprocess, "run", pip)
    requirements = ["torch==2.13.0", "numpy"]
    parser_env._make_parser_venv(
        "0.5.23",
        tmp_path,
        tmp_path / "venv" / "bin" / "python",
        tmp_path / "stamp.json",
        requirements,
        None,
        "3.11",
    )
    first_cost = next(i for i, e in enumerate(events) if "about 2.3 GB" in e and "about a minute" in e)
    warning = next(i for i, e in enumerate(events) if "CUDA build" in e)
    first_install = next(i for i, e in enumerate(events) if e == "venv created" or e.startswith("pip"))
    assert first_cost < first_install and warning < first_install
    progress = [e for e in events if "] installing" in e]
    assert [p.split("]")[0][-3:] for p in progress] == ["1/3", "2/3", "3/3"]
    assert events.index(progress[1]) < events.index("pip torch==2.13.0")
    assert (
        events[-1] == "import sglang.srt.server_args sglang.srt.configs.model_config"
    )  # after every install


def test_build_dry_run_says_the_images_inputs_and_expected_size_without_an_engine():
    env = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    text = run_cli("build", "--profile", "rtx5090-qwen3.6-35b-a3b-nvfp4-wheels", "--dry-run", env=env)
    assert text.returncode == 0, text.stderr
    assert "would make deploytool/sglang:" in text.stdout and "sglang: 0.5.23" in text.stdout
    assert "12.4 GB image" in text.stdout and "4.8 GB of wheels" in text.stdout
    data = json.loads(run_cli("build", "--profile", "sim", "--dry-run", "--json", env=env).stdout)
    assert data["dry_run"] and data["image"].startswith("deploytool/sim:") and "MB" in data["expected_size"]
    assert data["inputs"]["recipe"] == "sim"
