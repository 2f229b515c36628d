"""Raw NVML readings of PCI, NVLink and topology, to compare deploytool gpus against."""

import json

import pynvml as n


def t(v):
    return v.decode() if isinstance(v, bytes) else v


def opt(f, *args):
    """NVML's reading, or the error it raised in words: a card that lacks a reading still reports the rest."""
    try:
        return f(*args)
    except Exception as e:
        return f"ERR {type(e).__name__}: {e}"


def bus_id(f, *args):
    info = opt(f, *args)
    return t(info.busId) if hasattr(info, "busId") else info


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
        "pci_bus_id": bus_id(n.nvmlDeviceGetPciInfo, h),
        "numa_node": opt(n.nvmlDeviceGetNumaNodeId, h),
        "minor": opt(n.nvmlDeviceGetMinorNumber, h),
        "links": [],
    }
    for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
        st = opt(n.nvmlDeviceGetNvLinkState, h, link)
        if isinstance(st, str) and link > 0 and all(isinstance(x["state"], str) for x in g["links"]):
            g["links"].append({"link": link, "state": st})
            break
        g["links"].append(
            {
                "link": link,
                "state": st,
                "version": opt(n.nvmlDeviceGetNvLinkVersion, h, link),
                "remote": bus_id(n.nvmlDeviceGetNvLinkRemotePciInfo, h, link),
            }
        )
    out["gpus"].append(g)
for i in range(len(hs)):
    for j in range(i + 1, len(hs)):
        p = {"a": i, "b": j, "common_ancestor": opt(n.nvmlDeviceGetTopologyCommonAncestor, hs[i], hs[j])}
        for name in ("READ", "WRITE", "NVLINK", "ATOMICS", "PCI"):
            idx = getattr(n, f"NVML_P2P_CAPS_INDEX_{name}", None)
            if idx is not None:
                p[f"p2p_{name.lower()}"] = opt(n.nvmlDeviceGetP2PStatus, hs[i], hs[j], idx)
        out["pairs"].append(p)
print(json.dumps(out, indent=1, default=str))
