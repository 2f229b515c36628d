"""Host checks: gpus, slots, doctor."""

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from ..host import gpus

from ..errors import EXIT_FAILED, EXIT_NO_GPU
from ..host.nvml import STANDIN_ENV
from .app import (
    JsonOpt,
    ProfilesDirOpt,
    RequiredProfileOpt,
    app,
    console,
    console_err,
    json_error,
    print_json,
    styled,
)


# -- gpus ---------------------------------------------------------------------------------------
@app.command("gpus")
def gpus_command(json_output: JsonOpt = False, profiles_dir: ProfilesDirOpt = None) -> None:
    """This machine's NVIDIA GPUs (through NVML): each card, its PCIe link, NUMA node, NVLinks and
    MIG devices, the topology between every two cards (as `nvidia-smi topo -m`), and the
    profiles made for each card."""
    from rich.table import Table

    from ..host import gpus
    from ..host.fit import annotate_matches
    from ..host.topology import matrix_lines, p2p_lines
    from ..profiles import ProfileStore

    inventory = gpus.read_inventory()
    if inventory.error:
        hint = f"on a machine without a GPU: a CPU slot (`up --cpu`), or a described host ({STANDIN_ENV}=FILE, docs/gpus.md)"
        if json_output:  # the error object every command prints, and the empty list scripts read
            json_error(f"no GPUs: {inventory.error}", hint, EXIT_NO_GPU, "NoGpuError", gpus=[])
        console_err.print(f"no GPUs: {inventory.error}\n  hint: {hint}", highlight=False)
        raise typer.Exit(EXIT_NO_GPU)
    annotate_matches(inventory, ProfileStore(profiles_dir).all())
    if json_output:
        print_json(inventory)
        return
    title = f"driver {inventory.driver_version}, CUDA {inventory.cuda_driver_version}"
    cards = Table(title=title if inventory.source == "NVML" else f"{title} ({inventory.source})")
    cards.add_column("#")
    cards.add_column("UUID", no_wrap=True)
    for column in ("name", "CC", "memory total/free (GiB)", "power limit (W)", "profiles"):
        cards.add_column(column)
    links = Table(title="where each card sits")
    for column in ("#", "bus id", "PCIe now (max)", "NUMA node (CPUs)", "NVLink", "MIG"):
        links.add_column(column, no_wrap=column in ("bus id", "NUMA node (CPUs)"))
    for g in inventory.gpus:
        cards.add_row(
            str(g.index),
            g.uuid,
            g.name,
            g.compute_capability or "?",
            f"{_gib(g.memory_total_mib)} / {_gib(g.memory_free_mib)}",
            _num(g.power_limit_w),
            ", ".join(g.matching_profiles) or "-",
        )
        links.add_row(
            str(g.index),
            g.pci_bus_id or "?",
            g.pcie_text().removeprefix("PCIe "),
            f"{_num(g.numa_node)} ({g.cpu_affinity or '?'})",
            _nvlink_text(g),
            _mig_text(g),
        )
    console.print(cards)
    console.print(links)
    for g in inventory.gpus:
        for n, m in enumerate(g.mig_devices):
            console.print(
                f"  GPU{g.index} MIG{n}: {m.name} {m.uuid}, {_gib(m.memory_total_mib)} GiB "
                f"(GPU instance {_num(m.gpu_instance_id)}, compute instance {_num(m.compute_instance_id)})",
                highlight=False,
                markup=False,
            )
    lines = (
        [*matrix_lines(inventory), "", *p2p_lines(inventory)]
        if len(inventory.gpus) > 1
        else matrix_lines(inventory)
    )
    typer.echo("\n" + "\n".join(lines))


def _nvlink_text(g: "gpus.GpuInfo") -> str:
    if g.nvlinks is None:
        return "-"
    version = next((link.version for link in g.nvlinks if link.version), None)
    return f"{g.active_nvlinks} of {len(g.nvlinks)} up" + (f" ({version})" if version else "")


def _mig_text(g: "gpus.GpuInfo") -> str:
    if g.mig_mode is None:
        return "-"
    return f"on, {len(g.mig_devices)} device(s)" if g.mig_mode else "off"


def _gib(mib: int | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.1f}"


def _num(value: object) -> str:
    return "?" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


# -- slots --------------------------------------------------------------------------------------
@app.command("slots")
def slots_command(
    profile: RequiredProfileOpt, json_output: JsonOpt = False, profiles_dir: ProfilesDirOpt = None
) -> None:
    """The slots this host's cards make for a profile: one per card (or MIG device) for a one-card
    profile; for tensor parallelism, groups of the profile's GPU count, closest-connected first
    (NVLink, one PCIe switch, ...), groups that would cross NUMA nodes without NVLink refused;
    with the `--gpu` flags that deploy each slot. Exit 1 when the host has no slot for it."""
    from ..files import to_jsonable
    from ..host import gpus
    from ..memory.gate import slots_as_up_judges
    from ..profiles import ProfileStore

    chosen = ProfileStore(profiles_dir).get(profile)
    inventory = gpus.require_inventory(
        hint=f"slots groups the cards NVML sees: run it on the GPU host, or on a described host ({STANDIN_ENV}=FILE, "
        "docs/gpus.md)"
    )
    plan = slots_as_up_judges(chosen, inventory)
    if json_output:
        print_json({"source": inventory.source, **to_jsonable(plan)})
    else:
        typer.echo("\n".join(plan.lines()))
    if not plan.slots and not chosen.is_simulator:
        raise typer.Exit(EXIT_FAILED)  # the command ran and said no: no slot for this profile here


@app.command("doctor")
def doctor_command(json_output: JsonOpt = False) -> None:
    """Is this host ready? Engine, compose, NVIDIA runtime, driver, disk, state directory."""
    from rich.markup import escape
    from rich.table import Table

    from ..deploy import doctor as doctor_mod  # the deploy package: loaded only when doctor runs

    report = doctor_mod.run_doctor()
    if json_output:
        print_json(
            {"deploytool": report.about, "ok": report.ok, "counts": report.counts, "checks": report.checks}
        )
    else:
        if report.about is not None:
            typer.echo("\n".join(report.about.lines()))
        table = Table("check", "result", "detail")
        for c in report.checks:
            table.add_row(
                c.name,
                styled(c.status),
                escape(c.detail)
                + (f"\n[dim]hint: {escape(c.hint)}[/]" if c.hint and c.status != "pass" else ""),
            )
        console.print(table)
        counts = report.counts
        console.print(f"{counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail")
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)
