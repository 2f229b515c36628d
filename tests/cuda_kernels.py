"""A CUDA kernel small enough to compile in a test, and how to read which SM a cubin was
compiled for."""

from __future__ import annotations

import struct

AXPY = r"""
__global__ void axpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


def cubin_arch(data: bytes) -> int:
    """The SM a cubin was compiled for: an ELF of machine EM_CUDA (190), whose e_flags carry
    the architecture in bits 8-15 (0x78 = sm_120, 0x5a = sm_90)."""
    assert data[:4] == b"\x7fELF", "not an ELF file"
    machine = struct.unpack_from("<H", data, 18)[0]
    assert machine == 190, f"ELF machine {machine}, not EM_CUDA"
    return (struct.unpack_from("<I", data, 48)[0] >> 8) & 0xFF
