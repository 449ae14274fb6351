"""The few NVML readings ``dse profile`` takes (nvidia-ml-py): read-only, by design.

Only queries: the device's name, power draw, energy counter, SM clock, enforced power
limit, temperature and running processes. Nothing here, or anywhere in dse, sets a clock,
an application clock or a power limit; sweeping those is the user's, with ``nvidia-smi``
(docs/calibration.md). A missing library, driver or GPU is a :class:`~dse.errors.DseError`
(one line, exit code 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dse.errors import DseError

EXTRA = "pip install 'dse[profile]' (nvidia-ml-py and torch)"


def _pynvml():
    try:
        import pynvml
    except ImportError:
        raise DseError(f"dse profile needs nvidia-ml-py: {EXTRA}") from None
    return pynvml


@dataclass
class Device:
    """One GPU's NVML handle and the readings dse profile takes from it."""

    nvml: Any
    handle: Any
    index: int
    name: str
    driver: str

    def _read(self, fn, *args, scale: float = 1.0):
        try:
            return fn(self.handle, *args) * scale
        except self.nvml.NVMLError:  # not supported on this part or driver
            return None

    def power_w(self) -> float | None:
        return self._read(self.nvml.nvmlDeviceGetPowerUsage, scale=1e-3)  # mW

    def energy_j(self) -> float | None:
        return self._read(
            self.nvml.nvmlDeviceGetTotalEnergyConsumption, scale=1e-3
        )  # mJ since the driver loaded

    def sm_clock_mhz(self) -> float | None:
        return self._read(self.nvml.nvmlDeviceGetClockInfo, self.nvml.NVML_CLOCK_SM)

    def power_limit_w(self) -> float | None:
        return self._read(self.nvml.nvmlDeviceGetEnforcedPowerLimit, scale=1e-3)  # mW

    def temperature_c(self) -> float | None:
        return self._read(self.nvml.nvmlDeviceGetTemperature, self.nvml.NVML_TEMPERATURE_GPU)

    def processes(self) -> int | None:
        try:
            return len(self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle))
        except self.nvml.NVMLError:
            return None

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def open_device(index: int = 0) -> Device:
    """GPU ``index`` through NVML; one clear line (exit 2) where there is none."""
    nvml = _pynvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise DseError(
            f"no NVIDIA GPU to profile: NVML did not start ({exc}); dse profile measures an NVIDIA GPU "
            "through its driver on the machine it runs on"
        ) from None
    try:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            raise DseError("no NVIDIA GPU to profile: NVML found none")
        if not 0 <= index < count:
            raise DseError(
                "no such GPU", field="--device", value=index, allowed=f"0 to {count - 1}"
            )
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = nvml.nvmlDeviceGetName(handle)
        driver = nvml.nvmlSystemGetDriverVersion()
    except nvml.NVMLError as exc:
        nvml.nvmlShutdown()
        raise DseError(f"NVML could not read GPU {index}: {exc}") from None
    except DseError:
        nvml.nvmlShutdown()
        raise
    as_text = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
    return Device(nvml=nvml, handle=handle, index=index, name=as_text(name), driver=as_text(driver))
