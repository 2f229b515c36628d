"""Every NVML reading a multi-GPU inventory would make, raw, per GPU and per pair, each call's
answer or its error (NOT_SUPPORTED and the like kept as text): what `deploytool gpus` and a
topology reader can expect from a real card. JSON on stdout.

    python nvml_dump.py > nvml.json
"""

from __future__ import annotations

import ctypes
import json

import pynvml as n


def plain(value):
    """An NVML answer as JSON data: bytes as text, ctypes arrays (an affinity bitmask, a UUID
    field) as lists, structs as objects of their fields, all the way down; json's default=str
    would print an array as "<c_ulong_Array_4 object at ...>"."""
    if isinstance(value, bytes):
        return value.decode(errors="backslashreplace")
    if isinstance(value, ctypes.Array):
        return [plain(v) for v in value]
    if hasattr(value, "_fields_"):
        return {f[0]: plain(getattr(value, f[0])) for f in value._fields_}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def call(name: str, *args):
    """{"call": ..., "value": ...} or {"call": ..., "error": "NVMLError_NotSupported: Not Supported"}."""
    fn = getattr(n, name, None)
    if fn is None:
        return {"error": f"this nvidia-ml-py has no {name}"}
    try:
        value = fn(*args)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"value": plain(value)}


def gpu(handle, index: int) -> dict:
    out = {"index": index}
    for name in (
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetSerial",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetNumaNodeId",
        "nvmlDeviceGetMinorNumber",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetGpuMaxPcieLinkGeneration",
        "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkWidth",
        "nvmlDeviceGetPcieSpeed",
        "nvmlDeviceGetPowerManagementLimit",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceGetPowerManagementLimitConstraints",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetBAR1MemoryInfo",
        "nvmlDeviceGetMemoryBusWidth",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetArchitecture",
        "nvmlDeviceGetBrand",
        "nvmlDeviceGetVbiosVersion",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetVirtualizationMode",
        "nvmlDeviceGetNumGpuCores",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetCpuAffinity",
        "nvmlDeviceGetMemoryAffinity",
        "nvmlDeviceGetGpuFabricInfo",
        "nvmlDeviceGetGpuFabricInfoV",
        "nvmlDeviceGetBoardId",
        "nvmlDeviceGetMultiGpuBoard",
        "nvmlDeviceGetP2PStatus",
    ):
        if name == "nvmlDeviceGetTemperature":
            out[name] = call(name, handle, n.NVML_TEMPERATURE_GPU)
        elif name in ("nvmlDeviceGetCpuAffinity", "nvmlDeviceGetMemoryAffinity"):
            out[name] = (
                call(name, handle, 4)
                if name == "nvmlDeviceGetCpuAffinity"
                else call(name, handle, 4, getattr(n, "NVML_AFFINITY_SCOPE_NODE", 0))
            )
        elif name == "nvmlDeviceGetP2PStatus":
            continue
        else:
            out[name] = call(name, handle)
    for clock in ("GRAPHICS", "SM", "MEM", "VIDEO"):
        kind = getattr(n, f"NVML_CLOCK_{clock}")
        out[f"clock_{clock.lower()}"] = {
            "max": call("nvmlDeviceGetMaxClockInfo", handle, kind),
            "current": call("nvmlDeviceGetClockInfo", handle, kind),
        }
    links = []
    for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
        state = call("nvmlDeviceGetNvLinkState", handle, link)
        entry = {"link": link, "state": state}
        if "value" in state:
            entry["version"] = call("nvmlDeviceGetNvLinkVersion", handle, link)
            entry["remote_pci"] = call("nvmlDeviceGetNvLinkRemotePciInfo_v2", handle, link)
            entry["remote_device_type"] = call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            entry["capability_p2p"] = call(
                "nvmlDeviceGetNvLinkCapability", handle, link, getattr(n, "NVML_NVLINK_CAP_P2P_SUPPORTED", 0)
            )
        links.append(entry)
    out["nvlink"] = links
    return out


def main() -> None:
    n.nvmlInit()
    count = n.nvmlDeviceGetCount()
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    data = {
        "nvidia_ml_py": getattr(n, "__version__", None),
        "system": {
            name: call(name)
            for name in (
                "nvmlSystemGetDriverVersion",
                "nvmlSystemGetNVMLVersion",
                "nvmlSystemGetCudaDriverVersion",
                "nvmlSystemGetCudaDriverVersion_v2",
            )
        },
        "count": count,
        "gpus": [gpu(h, i) for i, h in enumerate(handles)],
        "pairs": [],
        "topology_nearest": [],
    }
    for i, h in enumerate(handles):
        for level in ("INTERNAL", "SINGLE", "MULTIPLE", "HOSTBRIDGE", "NODE", "SYSTEM"):
            const = getattr(n, f"NVML_TOPOLOGY_{level}", None)
            if const is not None:
                data["topology_nearest"].append(
                    {"gpu": i, "level": level, "reading": call("nvmlDeviceGetTopologyNearestGpus", h, const)}
                )
    for i in range(count):
        for j in range(count):
            if i == j:
                continue
            pair = {
                "a": i,
                "b": j,
                "common_ancestor": call("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j]),
            }
            for cap in ("READ", "WRITE", "NVLINK", "ATOMICS", "PCI", "PROP"):
                const = getattr(n, f"NVML_P2P_CAPS_INDEX_{cap}", None)
                if const is not None:
                    pair[f"p2p_{cap.lower()}"] = call("nvmlDeviceGetP2PStatus", handles[i], handles[j], const)
            data["pairs"].append(pair)
    n.nvmlShutdown()
    print(json.dumps(data, indent=1, default=str))


if __name__ == "__main__":
    main()
