"""Accelerator profiles: an accelerator of the user's own, written by ``dse calibrate``.

A profile is one YAML file holding a complete accelerator: its datasheet entry (as in
``data/hardware.yaml``), its power and thermal parameters (as in ``data/power.yaml``), its
fitted efficiencies (as in ``data/calibration.yaml``), and where each number came from
(``sources``: fitted from which measurement file, or inherited from the base part). A
study uses it

* by path: ``accelerator: my-a100.yaml`` (a name ending in ``.yaml``/``.yml``; relative
  to the directory dse runs in, as ``-o`` paths are), or
* by name: ``accelerator: my-a100`` when ``accelerators/my-a100.yaml`` exists in that
  directory or in a folder listed in the environment variable ``DSE_ACCELERATORS``
  (``os.pathsep``-separated).

Dask workers look the file up the same way, so a remote worker needs it at the same path.
The hardware and power lookups (:mod:`.time.hardware`, :mod:`.energy.power`) ask
:func:`find` for any name that is not in the catalog. docs/calibration.md has the format.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dse.analytic.time import frameworks, software
from dse.analytic.time.collectives import SCALEUP_TOPOLOGIES
from dse.errors import DseError, pydantic_message
from dse.files import atomic_write_text
from dse.yamlfile import SMALL_FILE_BYTES, load_yaml, read_bounded

FORMAT = "dse-accelerator-profile"
VERSION = 1
SUFFIXES = (".yaml", ".yml")
ENV = "DSE_ACCELERATORS"
#: the folder (relative to the working directory) searched for profiles by name
FOLDER = "accelerators"


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False
    )  # every number finite (.nan, .inf refused)


class HardwareEntry(_Strict):
    """The datasheet entry, as ``data/hardware.yaml`` has it (every number finite)."""

    vendor: str = ""
    peak_tflops: dict[Literal["bf16", "fp16", "tf32", "fp8"], Annotated[float, Field(gt=0)] | None]
    hbm_bw_gbs: float = Field(gt=0)
    hbm_gb: float = Field(gt=0)
    clock_max_mhz: float = Field(ge=100, le=10_000)  # MHz: a clock in GHz would read as 1-3
    clock_min_mhz: float = Field(ge=10, le=10_000)
    tdp_w: float = Field(gt=0)
    idle_w: float = Field(ge=0)
    scaleup_bw_gbs: float = Field(gt=0)
    scaleup_topology: Literal[SCALEUP_TOPOLOGIES]  # type: ignore[valid-type]
    compute_units: int = Field(gt=0)
    mamf_tflops: dict[str, Annotated[float, Field(gt=0)] | None] | None = None
    memory_reserved_gb: float = Field(ge=0)
    scaleup_domain: int = Field(ge=1, description="accelerators in one scale-up domain")
    #: the host link per direction (GB/s) and host memory per accelerator (GiB) activation
    #: offloading uses; unset: no offloading on the part
    host_link_gbs: float | None = Field(default=None, gt=0)
    host_memory_gb: float | None = Field(default=None, gt=0)
    #: the part's own scale-out network per direction (GB/s; a TPU's DCN), the default of the
    #: scaleout_bw_gbs input; unset: the input's default
    scaleout_bw_gbs: float | None = Field(default=None, gt=0)
    #: the one training stack the part is trained with (a TPU: maxtext), whatever `framework` names
    training_stack: str | None = None
    #: when the part's architecture first shipped (YYYY-MM; dse.analytic.time.software);
    #: left out: its base part's; null: none, its kernels are taken as mature
    architecture_shipped: str | None = None
    source: str = ""

    @field_validator("architecture_shipped")
    @classmethod
    def _a_month(cls, value: str | None) -> str | None:
        # the one rule of a release month (software_release's): YYYY-MM within its years
        if value is not None and not (
            software.MONTH.fullmatch(value) and np.isfinite(software.month_number(value))
        ):
            raise ValueError(software.MONTH_RULE)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> HardwareEntry:
        stacks = frameworks.framework_names()
        if self.training_stack is not None and self.training_stack not in stacks:
            raise ValueError(
                f"training_stack '{self.training_stack}' is not a training stack (allowed: "
                f"{', '.join(stacks)})"
            )
        if self.memory_reserved_gb >= self.hbm_gb:
            raise ValueError(
                f"memory_reserved_gb ({self.memory_reserved_gb:g}) must be below hbm_gb "
                f"({self.hbm_gb:g})"
            )
        for precision, mamf in (self.mamf_tflops or {}).items():
            peak = self.peak_tflops.get(precision)
            if mamf is not None and peak is not None and mamf > peak:
                raise ValueError(
                    f"mamf_tflops.{precision} ({mamf:g}) is above peak_tflops.{precision} ({peak:g}): "
                    "a measured matmul rate cannot beat the peak"
                )
        return self


class Activity(_Strict):
    compute: float = Field(ge=0, le=2)
    memory: float = Field(ge=0, le=2)
    waiting: float = Field(ge=0, le=2)
    parked: float = Field(ge=0, le=2)


class PowerEntry(_Strict):
    """The power and thermal entry, as ``data/power.yaml`` has it (every field present)."""

    vf_curve: list[tuple[float, float]] = Field(min_length=2)
    activity: Activity
    hbm_pj_per_byte: float = Field(
        ge=0, le=200
    )  # HBM2 ~31, DDR4 ~160 pJ/B: a higher value is a unit slip
    r_air_k_per_w: float | None = Field(default=None, gt=0)
    r_liquid_k_per_w: float | None = Field(default=None, gt=0)
    slowdown_temp_c: float = Field(ge=30, le=150)  # junction degC (parts: 80-100)
    # absent from a profile written before they existed: data/power.yaml's defaults apply
    leakage_share: float | None = Field(default=None, ge=0, le=1)  # of TDP
    leakage_per_k: float | None = Field(default=None, ge=0, le=0.2)  # 1/K
    source: str = ""

    @field_validator("vf_curve")
    @classmethod
    def _rising(cls, points):
        xs = [x for x, _ in points]
        if any(b < a for a, b in zip(xs, xs[1:], strict=False)) or xs[0] < 0 or xs[-1] != 1.0:
            raise ValueError("points [f/f_max, V/V_max] with f/f_max rising from >= 0 to 1")
        if any(v <= 0 for _, v in points):
            raise ValueError("voltages V/V_max must be positive")
        vs = [v for _, v in points]
        if any(b < a for a, b in zip(vs, vs[1:], strict=False)):
            raise ValueError(
                "voltages V/V_max must not fall as the clock rises (a higher clock needs at least "
                "the voltage of a lower one)"
            )
        if points[-1][1] != 1.0:
            raise ValueError("the voltage at f_max is V_max: the last point's voltage must be 1.0")
        return points


class CalibrationEntry(_Strict):
    """The accelerator's fitted efficiencies, as ``data/calibration.yaml`` has them."""

    matmul_eff_max: float = Field(gt=0, le=1)
    fp8_matmul_ratio: float = Field(gt=0, le=2)
    memory_eff: float = Field(gt=0, le=1)
    collective_eff: float = Field(gt=0, le=1)
    #: the part's own scale-out per-step latency (us; a TPU's DCN), replacing the shared value
    scaleout_latency_us: float | None = Field(default=None, ge=0)


class ProfileFile(_Strict):
    format: Literal["dse-accelerator-profile"]
    version: Literal[1]
    name: str = Field(min_length=1)
    base: str = ""
    created: str = ""
    hardware: HardwareEntry
    power: PowerEntry
    calibration: CalibrationEntry
    sources: dict[str, str] = Field(default_factory=dict)
    fit: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    """A loaded profile: its entries as plain dicts (the catalog's shapes) and its origin."""

    name: str
    path: Path
    base: str
    hardware: dict
    power: dict
    calibration: dict
    sources: dict
    fit: dict


#: profiles made findable in memory for the duration of a block (:func:`registered`)
_MEMORY: dict[str, tuple[int, Profile]] = {}
_SERIAL = itertools.count()


@contextmanager
def registered(profile: Profile) -> Iterator[str]:
    """Make ``profile`` findable under its name inside the block, without a file (the
    calibration fit evaluates the whole model with trial parameters this way)."""
    _MEMORY[profile.name] = (next(_SERIAL), profile)
    try:
        yield profile.name
    finally:
        _MEMORY.pop(profile.name, None)


def is_path(name: str) -> bool:
    """True when ``name`` refers to a profile file rather than by name."""
    return str(name).lower().endswith(SUFFIXES)


def search_folders() -> list[Path]:
    """Where a profile is looked up by name: ``$DSE_ACCELERATORS`` folders, then ``./accelerators``."""
    env = [Path(p).expanduser() for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    return [*env, Path(FOLDER)]


def names() -> list[str]:
    """The profiles a study may name by name here (the files of :func:`search_folders`), for
    a misspelt one's suggestion."""
    found = set()
    for folder in search_folders():
        try:
            found |= {p.stem for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file()}
        except OSError:  # no such folder, or one that cannot be read: no names from it
            continue
    return sorted(found)


def locate(name: str) -> Path | None:
    """The file of profile ``name`` (a path, or a name looked up in :func:`search_folders`)."""
    name = str(name)
    if is_path(name):
        path = Path(name).expanduser()
        return path if path.is_file() else None
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    for folder in search_folders():
        for suffix in SUFFIXES:
            path = folder / f"{name}{suffix}"
            if path.is_file():
                return path
    return None


def find(name: str) -> Profile | None:
    """The profile ``name`` refers to, or None where there is no such file. A file that is
    there but is not a valid profile raises :class:`~dse.errors.DseError` naming the file and
    the field. Loaded once per file version (path, modification time, size)."""
    if name in _MEMORY:
        return _MEMORY[name][1]
    path = locate(name)
    if path is None:
        return None
    st = path.stat()
    try:
        profile = _load(str(path.resolve()), st.st_mtime_ns, st.st_size)
    except DseError as exc:
        raise _shown(exc, path) from None
    if not is_path(name) and profile.name != name:
        raise DseError(
            f"the profile is named '{profile.name}' but was looked up as '{name}' (its file name)",
            file=str(path),
            field="name",
            value=profile.name,
        )
    return profile


def _shown(exc: DseError, path: Path) -> DseError:
    """``exc`` naming ``path`` as the user gave it rather than resolved."""
    exc.file = str(path)
    exc.args = (exc.render(),)
    return exc


def key(name: str) -> tuple | None:
    """What identifies the version of profile ``name`` (None: no such file): lookups cache on it."""
    if name in _MEMORY:
        return ("memory", _MEMORY[name][0])
    path = locate(name)
    if path is None:
        return None
    st = path.stat()
    return (str(path.resolve()), st.st_mtime_ns, st.st_size)


def load(path: Path | str) -> Profile:
    """Read and check a profile file (raises :class:`~dse.errors.DseError` on a bad one)."""
    path = Path(path)
    st = path.stat()
    return _load(str(path.resolve()), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=64)
def _load(path: str, mtime_ns: int, size: int) -> Profile:
    del mtime_ns, size  # part of the cache key only
    try:
        # (a profile is a few kB: one of 300 MB was read whole, 7 s, before it was refused)
        data = load_yaml(read_bounded(path, limit_bytes=SMALL_FILE_BYTES), numbers=False)
    except yaml.YAMLError as exc:
        raise DseError(f"not valid YAML: {str(exc).splitlines()[0]}", file=path) from None
    except UnicodeDecodeError as exc:
        raise DseError(
            f"not a text file (byte {exc.start} is not UTF-8)",
            file=path,
            allowed="a UTF-8 YAML file written by dse calibrate",
        ) from None
    except ValueError as exc:  # larger than a profile may be
        raise DseError(f"not an accelerator profile: it {exc}", file=path) from None
    except OSError as exc:
        raise DseError(f"cannot read the profile: {exc.strerror or exc}", file=path) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DseError(
            "not an accelerator profile",
            file=path,
            field="format",
            value=data.get("format") if isinstance(data, dict) else type(data).__name__,
            allowed=f"'{FORMAT}' (a file written by dse calibrate)",
        )
    try:
        p = ProfileFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        msg = (
            "required field is missing"
            if err["type"] == "missing"
            else pydantic_message(err["msg"])
        )
        raise DseError(
            msg,
            file=path,
            field=field,
            value=None if err["type"] == "missing" else err.get("input"),
            has_value=err["type"] != "missing",
        ) from None
    if (
        p.hardware.clock_min_mhz > p.hardware.clock_max_mhz
    ):  # equal: a part without clock control (TPUs)
        raise DseError(
            f"the lowest clock is above the highest (clock_max_mhz {p.hardware.clock_max_mhz:g})",
            file=path,
            field="hardware.clock_min_mhz",
            value=p.hardware.clock_min_mhz,
        )
    if p.hardware.idle_w >= p.hardware.tdp_w:
        raise DseError(
            f"idle power must be below the TDP (tdp_w {p.hardware.tdp_w:g})",
            file=path,
            field="hardware.idle_w",
            value=p.hardware.idle_w,
        )
    power = p.power.model_dump(
        exclude_none=True
    )  # a field left out takes data/power.yaml's default
    power["vf_curve"] = [list(pt) for pt in p.power.vf_curve]
    return Profile(
        name=p.name,
        path=Path(path),
        base=p.base,
        # a field the file leaves out is not given (its base part's applies, as for a field the
        # catalog gained after the profile was written: hardware.entry); one written null is
        hardware={
            k: v
            for k, v in p.hardware.model_dump().items()
            if v is not None or k in p.hardware.model_fields_set
        },
        power=power,
        calibration=p.calibration.model_dump(exclude_none=True),
        sources=dict(p.sources),
        fit=dict(p.fit),
    )


def dump(profile: dict, path: Path | str, header: str = "") -> Path:
    """Write a profile (the :class:`ProfileFile` fields as a dict) after checking it; returns the path."""
    ProfileFile.model_validate(profile)
    path = Path(path)
    text = yaml.safe_dump(
        profile, sort_keys=False, default_flow_style=False, width=100, allow_unicode=True
    )
    # whole or not at all (an earlier profile survives a crash), never through a link
    atomic_write_text(path, header + text)
    return path
