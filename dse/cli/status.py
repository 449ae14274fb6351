"""``dse status``: a run's progress and hypervolume history; for a run in progress (in any
terminal) its pace, time left, failures and best values from the progress file."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dse.cli.pace import progress_lines
from dse.errors import printable
from dse.progress import read_progress
from dse.results import open_results
from dse.search.phases import PhasesSummary


def show_status(results: Path, console: Console) -> None:
    run = open_results(results)
    store = run.store
    # the state read before the log's rows were counted (a running run's state is newer
    # the moment after: its counts would run ahead of the log's)
    meta, state = store.meta, run.state_when_opened
    history = state.history
    last = state.last  # the tallies as of the last batch told (no log read)
    n, failed = (last.evaluations, last.failed) if last else (0, 0)
    feasible, front_size = (last.feasible, last.front_size) if last else (0, 0)
    owner = store.live_lock_owner()
    if owner:
        status = "running"
    elif state.finished:
        status = "finished"
    else:
        status = "stopped (resume with `dse resume`)"
    if owner:
        status += f" (process {owner.pid} on {owner.host})"
    # free text (names, paths, notes, reasons) is escaped or printed with markup=False: '[dashboard]' is text
    # control characters escaped: a reason text or a name read from the folder moves no cursor
    console.print(
        f"[bold]{escape(printable(meta.study))}[/bold] in {escape(printable(f'{store.path}: {status}'))}"
    )
    console.print(
        escape(
            printable(
                f"evaluator {meta.evaluator} {meta.evaluator_version}, "
                f"search {state.algorithm}, created {meta.created}"
            )
        )
    )
    keeps = {
        "all": "every evaluation",
        "feasible": "the feasible evaluations",
        "front": "the evaluations on the front when evaluated",
    }[state.keep]
    in_flight = run.log_rows - n
    console.print(
        f"evaluation log: {run.log_rows:,} rows in {len(store.log_files()):,} file(s), keeping {keeps} in full"
        + (f" ({in_flight:,} written after the last batch was told)" if in_flight > 0 else "")
    )
    phases = PhasesSummary.of(state.driver)
    if phases is not None:  # the search's phases (dse.search.phases): what it chose, where it is
        console.print(printable(f"search: {phases.explain}"), markup=False)
        if owner:
            front_label = "front so far (the run is going)"
        else:
            front_label = f"front {phases.front}: {phases.front_detail}"
        console.print(
            f"phase {phases.phase}, {phases.polish_asked:,} polish evaluations, "
            f"{phases.spent_s:.1f} s run time; {front_label}",
            markup=False,
        )
    as_of = ""
    if owner and last:
        as_of = f" as of batch {last.batch} (the last one told; the line 'in progress' is live)"
    if not owner and in_flight > 0:  # a run stopped mid-batch: those rows count when it resumes
        as_of = (
            f" as of the last batch told ({in_flight:,} later evaluations are in the log: `dse resume` "
            "counts them)"
        )
    hv = "hypervolume - (no front yet)"
    if last and front_size:
        hv = f"hypervolume {last.hypervolume:.4f} (normalised to this run's first front, see docs/results.md; `dse compare` puts runs in one frame)"
    console.print(
        f"evaluations {n:,} (failed {failed:,}), feasible {feasible:,}, "
        f"front size {front_size:,}, {hv}{as_of}"
    )
    if n > feasible and run.log_rows:  # what export, plot and report send the user here for
        reasons, kinds = state.ruled_out, state.ruled_out_kinds
        if reasons is None:  # a run saved before the state kept them: from the log
            from dse.outputs.scan import log_tallies

            reasons = log_tallies(store.log_files(), run.study)[3]
        if kinds is None:
            kinds = len(reasons)
        if reasons:
            shown = "; ".join(f"{printable(reason)} ({count:,})" for reason, count in reasons[:5])
            more = f"; and {kinds - 5} more" if kinds > 5 else ""
            console.print(f"ruled out: {shown}{more}", highlight=False, markup=False)
    if not owner:  # the datasets as export, plot, report and show would find them
        console.print(printable(f"datasets: {run.datasets_state()}"), highlight=False, markup=False)
    live = read_progress(store.path)
    if owner and live and live.get("pid") == owner.pid:
        age = time.time() - float(live.get("updated_unix", time.time()))
        # progress.json is written every 2 s, state.json every batch: never fewer than the batches told
        done = f"{max(int(live.get('done', 0)), n):,}" + (
            f" of {live['total']:,}" if live.get("total") else ""
        )
        if n > int(live.get("done", 0)):  # the state is newer: its tallies, not older ones beside
            live = {**live, "failed": failed, "feasible": feasible, "front_size": front_size}
        pace, best = progress_lines(live)
        console.print(
            f"in progress: {done} candidates done · {pace} (updated {age:.0f} s ago)",
            highlight=False,
            markup=False,
        )
        console.print(printable(best), highlight=False, markup=False)
        if live.get("note"):
            console.print(printable(f"last note: {live['note']}"), highlight=False, markup=False)
    if history:
        t = Table(title="progress per batch (hypervolume in this run's frame)")
        for col, unit in (
            ("batch", ""),
            ("evaluations", ""),
            ("feasible", ""),
            ("failed", ""),
            ("front_size", ""),
            ("hypervolume", "1"),
            ("seconds", "s"),
        ):  # the unit under the name (80 columns hold the table); [s] is not markup
            t.add_column(
                escape(f"{col}\n[{unit}]") if unit else col, justify="right", min_width=len(col)
            )
        rows = history if len(history) <= 30 else [*history[:5], None, *history[-25:]]
        for r in rows:
            if r is None:  # the batches between the first five and the last 25
                t.add_row("…", f"({len(history) - 30:,} batches not shown)", *[""] * 5)
                continue
            t.add_row(
                str(r.batch),
                f"{r.evaluations:,}",
                f"{r.feasible:,}",
                f"{r.failed:,}",
                f"{r.front_size:,}",
                f"{r.hypervolume:.4f}",
                f"{r.seconds:.2f}",
            )
        console.print(t)
