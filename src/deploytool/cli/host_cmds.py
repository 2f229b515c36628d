"""Host checks: gpus, doctor."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import EXIT_FAILED, EXIT_NO_GPU
from .app import JsonOpt, ProfilesDirOpt, app, console, console_err, print_json, styled


# -- gpus --------------------------------------------------------------------------------------
@app.command("gpus")
def gpus_command(json_output: JsonOpt = False, profiles_dir: ProfilesDirOpt = None) -> None:
    """This machine's NVIDIA GPUs (through NVML) and the profiles made for each card."""
    from ..host import gpus
    from ..profiles import ProfileStore

    inventory = gpus.read_inventory()
    if inventory.error:
        if json_output:
            print_json({"gpus": [], "error": inventory.error})
        else:
            console_err.print(f"no GPUs: {inventory.error}", highlight=False)
        raise typer.Exit(EXIT_NO_GPU)
    gpus.annotate_matches(inventory, ProfileStore(profiles_dir).all())
    if json_output:
        print_json(inventory)
        return
    table = Table(title=f"driver {inventory.driver_version}, CUDA {inventory.cuda_driver_version}")
    for column in ("#", "UUID", "name", "CC", "memory total/free (GiB)", "power limit (W)", "PCIe gen", "width",
                   "profiles"):
        table.add_column(column)
    for g in inventory.gpus:
        table.add_row(str(g.index), g.uuid, g.name, g.compute_capability or "?",
                      f"{_gib(g.memory_total_mib)} / {_gib(g.memory_free_mib)}",
                      _num(g.power_limit_w), f"{_num(g.pcie_link_gen)} (max {_num(g.pcie_link_gen_max)})",
                      f"x{_num(g.pcie_link_width)} (max x{_num(g.pcie_link_width_max)})",
                      ", ".join(g.matching_profiles) or "-")
    console.print(table)


def _gib(mib: int | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.1f}"


def _num(value: object) -> str:
    return "?" if value is None else f"{value:g}" if isinstance(value, float) else str(value)



@app.command("doctor")
def doctor_command(json_output: JsonOpt = False) -> None:
    """Is this host ready? Engine, compose, NVIDIA runtime, driver, disk, state directory."""
    from ..deploy import doctor as doctor_mod  # the deploy package: loaded only when doctor runs

    report = doctor_mod.run_doctor()
    if json_output:
        print_json({"ok": report.ok, "counts": report.counts, "checks": report.checks})
    else:
        table = Table("check", "result", "detail")
        for c in report.checks:
            table.add_row(c.name, styled(c.status),
                          escape(c.detail) + (f"\n[dim]hint: {escape(c.hint)}[/]" if c.hint and c.status != "pass" else ""))
        console.print(table)
        counts = report.counts
        console.print(f"{counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail")
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)
