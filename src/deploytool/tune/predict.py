"""What deploytool can say about a candidate's speed before it starts one, to measure likely
winners first and to leave unstarted the ones that cannot catch the leader.

The prediction is relative (units of one request's decode speed), calibrated on what was
measured: predicted tok/s = prediction x (measured / predicted of the candidates measured).
Its parts, each from the plan or the launch:

* the batch a decode step runs: the highest load level, capped by the plan's running limit and
  by the requests the plan's KV pool holds at the space's prompt + output tokens;
* the roofline: a decode step reads the weights once and every running request's KV, so the
  step's time goes with weights + batch x context x KV bytes per token, and throughput with
  batch / that;
* CUDA graphs: a batch above `cuda-graph-max-bs`, or `--disable-cuda-graph`, runs eager, slower
  by the eager factor (the reference runtime's `eager-decode-factor`; 0.6 for a real runtime);
* the draft: k draft steps yield 1 + a + ... + a^k tokens a verify step and cost
  1 + draft_cost x k + verify_cost x k x batch steps. The acceptance `a` is known only for the
  reference runtime (`spec-accept-rate`); for a real runtime the draft's gain is unknown before
  a measurement and the prediction leaves it at 1 (no reordering by draft length).
"""

from __future__ import annotations

from typing import Any

GIB = 1 << 30
EAGER_FACTOR = 0.6  # a real runtime's eager decode against graphs: a guess, so the slack below is wide


def predicted(planned: Any, space: Any) -> float:
    args = planned.candidate.profile.server.args
    sim = planned.candidate.profile.is_simulator
    top = max(space.load) if space.workload == "table" else _workload_width(space)
    # unplanned and unset: the reference runtime's own default (8), else the load decides
    limit = planned.running_limit or (
        int(args["max-running-requests"])
        if isinstance(args.get("max-running-requests"), int)
        else 8
        if sim
        else top
    )
    batch = max(1, min(top, limit))
    per_request = space.prompt_tokens + space.output_tokens
    if planned.pool_tokens:
        batch = max(1, min(batch, planned.pool_tokens // max(1, per_request)))
    speed = float(batch)
    weights, kv = _bytes(planned, args, sim)
    if weights:
        # relative to a batch of one: the roofline's bend as the KV read grows with the batch
        speed *= (weights + kv * per_request) / (weights + batch * kv * per_request)
    if sim:
        # the reference runtime caps one request at decode-tps whatever the batch: its speed is
        # not bandwidth-bound, so its roofline is flat (its weights are only a number for the pool)
        speed = float(batch)
    graph_cap = args.get("cuda-graph-max-bs")
    eager = float(args.get("eager-decode-factor", EAGER_FACTOR)) if sim else EAGER_FACTOR
    if args.get("disable-cuda-graph") is True or (isinstance(graph_cap, int) and batch > graph_cap):
        speed *= eager
    steps = args.get("speculative-num-steps")
    accept = float(args.get("spec-accept-rate", 0) or 0) if sim else 0.0
    # only the reference runtime's speculative gain is known ahead (its acceptance is a flag)
    if sim and isinstance(steps, int) and steps > 0 and accept > 0:
        k = (
            steps
            if not isinstance(args.get("speculative-num-draft-tokens"), int)
            else min(steps, int(args["speculative-num-draft-tokens"]) - 1)
        )
        gain = (k + 1) if accept >= 1 else (1 - accept ** (k + 1)) / (1 - accept)
        cost = (
            1
            + float(args.get("spec-draft-cost", 0.1)) * k
            + float(args.get("spec-verify-cost", 0.02)) * k * batch
        )
        speed *= gain / cost
    return speed


def _workload_width(space: Any) -> int:
    settings = space.workload_settings or {}
    conc = settings.get("concurrency") or space.load
    return max(conc) if isinstance(conc, list) and conc else max(space.load)


def _bytes(planned: Any, args: dict[str, Any], sim: bool) -> tuple[float, float]:
    weights = getattr(planned, "weights_gib", None)
    kv = getattr(planned, "kv_bytes_per_token", None)
    if sim and weights is None:
        weights, kv = args.get("weights-gib"), args.get("kv-bytes-per-token")
    return (float(weights) * GIB if weights else 0.0), float(kv or 0)


def calibration(
    results: list[Any], estimates: dict[str, Any], preds: dict[str, float]
) -> tuple[float, float] | None:
    """(lowest, highest) of measured / predicted over the candidates measured; None before any."""
    ratios = [
        estimates[r.id].mean / preds[r.id]
        for r in results
        if estimates.get(r.id) is not None and preds.get(r.id)
    ]
    return (min(ratios), max(ratios)) if ratios else None
