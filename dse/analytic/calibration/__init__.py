"""Calibration: fit the analytic model's parameters for one accelerator to measurements.

``dse calibrate`` reads measurement files (:mod:`.readers`: clock or power-cap sweeps of
kernels, pipeline stages and workloads; step times of training runs with their
configuration; GPU telemetry from ``nvidia-smi`` and DCGM matched to the steps by
timestamp, :mod:`.telemetry`), fits the physical parameters those measurements determine
by bounded least squares (:mod:`.fit`, predictions from :mod:`.forward`, which calls the
model's own functions), reports the error per row with held-out rows apart, and writes an
accelerator profile (:mod:`.build`; read back by :mod:`dse.analytic.profiles`).
``dse profile`` measures this machine's NVIDIA GPU into the sweep format
(:mod:`.measure`, through the small NVML layer :mod:`.nvml`). docs/calibration.md has the
file formats and the walk-through.
"""
