"""Which SGLang release's rules plan a launch. The planner follows SGLang 0.5.23's code, and
0.5.17's where the two differ in a rule it models (the lent H200's harness runs 0.5.17): a
profile's `image.runtime_version` picks the release, and a runtime the planner holds no rules
for is planned by the nearest release before it, with a warning that says so."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

# The release the planner's code paths and constants were read from.
PLANNER_RELEASE = "0.5.23"
# Releases whose differing rules the planner holds, oldest first.
MODELLED_RELEASES = ("0.5.17", "0.5.23")

# arg_groups/overrides.py `_MAMBA_EXTRA_BUFFER_ARCHS` of each release: the architectures whose
# Mamba radix cache strategy `auto` resolves to extra_buffer (more state slots per running
# request). 0.5.17's list lacks the text-only Qwen3.5/3.6 entries (`Qwen3_5MoeForCausalLM`,
# `Qwen3_5ForCausalLM`): a text-only Qwen3.6 checkpoint runs no_buffer there.
EXTRA_BUFFER_ARCHS = {
    "0.5.17": frozenset(
        {
            "KimiLinearForCausalLM",
            "Qwen3_5ForConditionalGeneration",
            "Qwen3_5MoeForConditionalGeneration",
            "Qwen3NextForCausalLM",
            "InternS2PreviewForConditionalGeneration",
            "MiniCPMV4_6ForConditionalGeneration",
            "BailingMoeV2_5ForCausalLM",
            "FalconH1ForCausalLM",
            "GraniteMoeHybridForCausalLM",
            "NemotronHForCausalLM",
            "NemotronHPuzzleForCausalLM",
            "KimiK3ForConditionalGeneration",
        }
    ),
    "0.5.23": frozenset(
        {
            "KimiLinearForCausalLM",
            "Qwen3_5ForConditionalGeneration",
            "Qwen3_5MoeForConditionalGeneration",
            "Qwen3_5MoeForCausalLM",
            "Qwen3_5ForCausalLM",
            "Qwen3NextForCausalLM",
            "Qwen4ExpForConditionalGeneration",
            "InternS2PreviewForConditionalGeneration",
            "MiniCPMV4_6ForConditionalGeneration",
            "MiniCPMV4_7ForConditionalGeneration",
            "BailingMoeV2_5ForCausalLM",
            "BailingMoeV3ForCausalLM",
            "BailingMoeV3VLForConditionalGeneration",
            "FalconH1ForCausalLM",
            "GraniteMoeHybridForCausalLM",
            "Glm5NextForConditionalGeneration",
            "NemotronHForCausalLM",
            "NemotronHPuzzleForCausalLM",
            "NemotronH_Omni_Reasoning_V3",
            "KimiK3ForConditionalGeneration",
            "InklingForConditionalGeneration",
            "InklingForConditionalGenerationMTP",
        }
    ),
}


def rules_release(runtime_version: str | None) -> tuple[str, str | None]:
    """(the release whose rules plan a launch of `runtime_version`, a warning or None). No
    version (a profile that pins none): the planner's own release, silently."""
    if not runtime_version:
        return PLANNER_RELEASE, None
    if runtime_version in MODELLED_RELEASES:
        return runtime_version, None
    try:
        wanted = Version(runtime_version)
    except InvalidVersion:
        return PLANNER_RELEASE, (
            f"runtime version {runtime_version!r} is not a version number: planned by SGLang "
            f"{PLANNER_RELEASE}'s rules"
        )
    if wanted.release[:3] in {Version(r).release[:3] for r in MODELLED_RELEASES}:  # a post or local build
        base = next(r for r in MODELLED_RELEASES if Version(r).release[:3] == wanted.release[:3])
        return base, None
    before = [r for r in MODELLED_RELEASES if Version(r) < wanted]
    chosen = before[-1] if before else MODELLED_RELEASES[0]
    return chosen, (
        f"the runtime is SGLang {runtime_version}; the planner holds the rules of "
        f"{', '.join(MODELLED_RELEASES)} and plans it by {chosen}'s: a rule changed in between "
        "(a resolved default, an allocation) would move the pools; check the plan against the "
        "server's log once (docs/memory.md)"
    )
