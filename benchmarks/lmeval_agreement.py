"""Agreement of deploytool's lm-eval-compatible GSM8K figures with lm-evaluation-harness itself,
on the same server: prints both figures and the per-question agreement of each filter.

    python benchmarks/lmeval_agreement.py LMEVAL_SAMPLES.jsonl DEPLOYTOOL_RESULTS.json

LMEVAL_SAMPLES is lm_eval's --log_samples file of the gsm8k task; DEPLOYTOOL_RESULTS is the
results.json of `deploytool qualify --suite gsm8k` run with the lm-eval style (docs/qualify.md
gives both commands). Per-question agreement compares lm-eval's exact_match per document with
deploytool's re-scoring of the same reply text: deploytool only stores the gate filter's
outcome per question, so the other filter is compared as an aggregate figure.
"""

from __future__ import annotations

import json
import sys


def main(samples_path: str, results_path: str) -> None:
    lm: dict[str, dict[int, float]] = {}
    with open(samples_path, encoding="utf-8") as samples:
        for line in samples:
            row = json.loads(line)
            lm.setdefault(row["filter"], {})[row["doc_id"]] = float(row["exact_match"])
    with open(results_path, encoding="utf-8") as results:
        doc = json.load(results)
    gsm8k = next(s for s in doc["suites"] if s["name"] == "gsm8k")
    ours = gsm8k["figures"]["modes"]["lm-eval thinking-off"]
    n = ours["questions"]
    print(f"questions: lm-eval {len(lm['flexible-extract'])}, deploytool {n}")
    for name in ("strict-match", "flexible-extract"):
        theirs = sum(lm[name][i] for i in range(n)) / n
        print(
            f"{name}: lm-eval {theirs:.4f}  deploytool {ours[name + '_accuracy']:.4f}  "
            f"difference {abs(theirs - ours[name + '_accuracy']) * 100:.2f} points"
        )
    metric = ours["gate_metric"]
    same = sum(int(ours["per_question"][i]) == int(lm[metric][i]) for i in range(n))
    print(f"{metric} per question: {same} of {n} identical")
    if "deploytool thinking-off" in gsm8k["figures"]["modes"]:
        own = gsm8k["figures"]["modes"]["deploytool thinking-off"]
        print(
            f"deploytool's own prompt and scorer, same server: strict {own['strict_accuracy']:.4f}, "
            f"flexible {own['flexible_accuracy']:.4f}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:3])
