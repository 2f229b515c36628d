"""A two-card NVML with the library's call names and value shapes, for the readers that need
only the basic calls (the stand-in NVML of deploytool.host.nvml_standin describes whole hosts)."""

from __future__ import annotations

from types import SimpleNamespace


class FakeNvml:
    """NVML's call names and value shapes (bytes or str names, mW power, (major, minor))."""

    class NotSupported(Exception):
        pass

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-0000000{h}-aaaa-bbbb-cccc-dddddddddddd"

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200" if h == 0 else "NVIDIA GeForce RTX 5090"

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=143771 * 2**20, free=140000 * 2**20)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (9, 0) if h == 0 else (12, 0)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700000

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        raise self.NotSupported()

    def nvmlSystemGetDriverVersion(self):
        return "580.95.05"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 13000
