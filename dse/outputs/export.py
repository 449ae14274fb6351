"""Export a run's Pareto set or all its evaluations: CSV, Parquet, netCDF, zarr, JSON."""

from __future__ import annotations

import json
from pathlib import Path

from dse.errors import DseError
from dse.results import open_results

SUFFIX = {"csv": ".csv", "parquet": ".parquet", "netcdf": ".nc", "zarr": ".zarr", "json": ".json"}


def export_results(results: Path, fmt: str, *, front: bool = True, output: Path | None = None) -> Path:
    """Write the dataset in ``fmt``; returns the path written."""
    if fmt not in SUFFIX:
        raise DseError(f"unknown export format '{fmt}'", allowed=", ".join(SUFFIX))
    ds = open_results(results).dataset(front=front)
    stem = "pareto" if front else "evaluations"
    output = Path(output) if output else Path(results) / f"{stem}{SUFFIX[fmt]}"
    if fmt == "netcdf" and output.resolve() == (Path(results) / f"{stem}.nc").resolve():
        return output  # already there
    output.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "netcdf":
        ds.to_netcdf(output, engine="h5netcdf")
    elif fmt == "zarr":
        ds.to_zarr(output, mode="w")
    else:
        df = ds.to_dataframe().reset_index(drop=True)
        if fmt == "csv":
            df.to_csv(output, index=False)
        elif fmt == "parquet":
            df.to_parquet(output, index=False)
        else:
            doc = {
                "attributes": {k: (v.item() if hasattr(v, "item") else v) for k, v in ds.attrs.items()},
                "variables": {n: {"units": ds[n].attrs.get("units", ""), "long_name": ds[n].attrs.get("long_name", "")}
                              for n in ds.data_vars},
                "candidates": json.loads(df.to_json(orient="records")),
            }
            output.write_text(json.dumps(doc, indent=1) + "\n")
    return output
