"""The GPUs a wheel can be built for, described as Triton and ninetoothed see them.

Builds run on machines without GPUs, so these descriptions stand in for the CUDA
driver: ninetoothed sizes its tiles and default pipeline depth from the registers
and shared memory it is told about, and Triton compiles for the target's number.
The figures are NVIDIA's per-arch limits (CUDA C Programming Guide, "Technical
Specifications per Compute Capability"); `max_shared_mem` is the opt-in maximum
per block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Target:
    name: str  # "sm_90"
    capability: int  # Triton's number, 10 * major + minor
    max_num_regs: int  # 32-bit registers per multiprocessor
    max_shared_mem: int  # bytes of shared memory one block may opt into
    multiprocessor_count: int  # of the arch's flagship part
    warp_size: int = 32

    def device_properties(self) -> dict[str, int]:
        """What `triton.runtime.driver.active.utils.get_device_properties` returns."""
        return {
            "max_shared_mem": self.max_shared_mem,
            "max_num_regs": self.max_num_regs,
            "multiprocessor_count": self.multiprocessor_count,
            "warpSize": self.warp_size,
            "sm_clock_rate": 0,
            "mem_clock_rate": 0,
            "mem_bus_width": 0,
        }


TARGETS: Mapping[str, Target] = {
    target.name: target
    for target in (
        Target("sm_80", 80, 65536, 166912, 108),  # A100
        Target("sm_86", 86, 65536, 101376, 84),  # A10, RTX 30xx
        Target("sm_89", 89, 65536, 101376, 128),  # L4, L40, RTX 40xx
        Target("sm_90", 90, 65536, 232448, 132),  # H100, H200
        Target("sm_100", 100, 65536, 232448, 148),  # B200
        Target("sm_120", 120, 65536, 101376, 170),  # RTX 50xx
    )
}
