"""The last lines of `make demo`: what ran where, read back from `deploytool status --json`."""

import json
import sys

from deploytool.release.state import slot_dir

for slot in json.load(sys.stdin)["slots"]:
    print(f"slot {slot['slot']}: serving {slot['serving_url']}")
    for r in slot["releases"]:
        role = f" ({r['role']})" if r["role"] else ""
        print(
            f"  release {r['release']}{role}: {r['profile']} [{r['state']}, {r['health'] or 'stopped'}] {r['image']}"
        )
print("The reference runtime is a simulator, not a model: docs/sim.md lists the rules it answers by.")
print(f"Qualification reports: {slot_dir('cpu')}/releases/<N>/qualify/report.html")
print("Its server log: deploytool logs --cpu (--follow to keep reading)")
print(
    "Take it out of service: deploytool stop --cpu (deploytool start --cpu puts it back; "
    "deploytool down --cpu removes the slot)"
)
