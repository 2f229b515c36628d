"""Raw NVML readings of PCI, NVLink and topology, to compare deploytool gpus against."""

import json

import pynvml as n


def t(v):
    return v.decode() if isinstance(v, bytes) else v


def opt(f):
    try:
        return f()
    except Exception as e:
        return f"ERR {type(e).__name__}: {e}"


n.nvmlInit()
out = {
    "driver": t(n.nvmlSystemGetDriverVersion()),
    "nvml_version": t(n.nvmlSystemGetNVMLVersion()),
    "gpus": [],
    "pairs": [],
}
hs = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
for i, h in enumerate(hs):
    g = {
        "index": i,
        "uuid": t(n.nvmlDeviceGetUUID(h)),
        "name": t(n.nvmlDeviceGetName(h)),
        "pci_bus_id": opt(lambda: t(n.nvmlDeviceGetPciInfo(h).busId)),
        "numa_node": opt(lambda: n.nvmlDeviceGetNumaNodeId(h)),
        "minor": opt(lambda: n.nvmlDeviceGetMinorNumber(h)),
        "links": [],
    }
    for l in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
        st = opt(lambda: n.nvmlDeviceGetNvLinkState(h, l))
        if isinstance(st, str) and l > 0 and all(isinstance(x["state"], str) for x in g["links"]):
            g["links"].append({"link": l, "state": st})
            break
        g["links"].append(
            {
                "link": l,
                "state": st,
                "version": opt(lambda: n.nvmlDeviceGetNvLinkVersion(h, l)),
                "remote": opt(lambda: t(n.nvmlDeviceGetNvLinkRemotePciInfo(h, l).busId)),
            }
        )
    out["gpus"].append(g)
for i in range(len(hs)):
    for j in range(i + 1, len(hs)):
        p = {
            "a": i,
            "b": j,
            "common_ancestor": opt(lambda: n.nvmlDeviceGetTopologyCommonAncestor(hs[i], hs[j])),
        }
        for name in ("READ", "WRITE", "NVLINK", "ATOMICS", "PCI"):
            idx = getattr(n, f"NVML_P2P_CAPS_INDEX_{name}", None)
            if idx is not None:
                p[f"p2p_{name.lower()}"] = opt(lambda: n.nvmlDeviceGetP2PStatus(hs[i], hs[j], idx))
        out["pairs"].append(p)
print(json.dumps(out, indent=1, default=str))
