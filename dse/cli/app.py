"""Command-line interface: ``dse run | resume | validate | evaluate | export | plot | report |
show | sensitivity | compare | status | describe | validate-model | calibrate | profile``.

Every user error ends in one line on stderr naming the file, the field, the value and
what is allowed, and exit code 2; never a Python traceback.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import sys
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from dse import __version__, signals
from dse.errors import DseError, counted, printable, pydantic_message
from dse.files import names_a_file_type, not_a_file

app = typer.Typer(
    name="dse",
    help="Design-space exploration of the energy, time and thermal behaviour of large-model training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


def _width(stream) -> int | None:
    """A terminal's width, or ``COLUMNS`` where it is a positive number (a log, a batch job's
    output); else 160 when piped, so that a progress line stays whole. (``COLUMNS=0`` made
    rich print nothing at all, errors included.)"""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if stream.isatty() else 160


def _usable_streams() -> None:
    """A closed standard stream (``>&-`` in cron or a daemon) takes what is written to it as
    /dev/null would; a stream whose encoding lacks a character (``LC_ALL=C`` without UTF-8)
    writes an escape for it instead of failing."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - open for the life of the process
        elif hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # not a text stream of Python's own (a test's capture)
                pass


class _Console(Console):
    """rich's console, ending as a shell says a closed pipe ends a program (rich: exit 1)."""

    def on_broken_pipe(self) -> None:
        _pipe_closed()


@dataclass
class _Call:
    """What one call of :func:`main` holds: its consoles (bound to the standard streams as
    the call found them), its arguments, and what it has already told the user."""

    argv: list[str]
    out: Console = field(init=False)
    err: Console = field(init=False)
    interrupted: bool = False  # a run said how it was stopped (main adds nothing then)
    ended: bool = False  # a run has said how it ended: a Ctrl-C now has nothing left to stop

    def __post_init__(self) -> None:
        self.out = _Console(file=sys.stdout, width=_width(sys.stdout))
        # never break a message or a path
        self.err = _Console(file=sys.stderr, soft_wrap=True, width=_width(sys.stderr))


#: the call of main() in progress (set and reset by main: nothing is carried between calls)
_CALL: ContextVar[_Call] = ContextVar("dse_cli_call")


def _call() -> _Call:
    """The call in progress (a command invoked without :func:`main`, as ``app()``, gets a
    fresh one each time it asks: nothing is kept for it)."""
    try:
        return _CALL.get()
    except LookupError:
        return _Call(sys.argv[1:])


class _CallConsole:
    """``out`` or ``err``: the console of the call in progress."""

    def __init__(self, which: str) -> None:
        self._which = which

    def __getattr__(self, name: str):
        return getattr(getattr(_call(), self._which), name)


out = _CallConsole("out")
err = _CallConsole("err")

StudyArg = Annotated[Path, typer.Argument(help="study file (YAML)", show_default=False)]
ResultsArg = Annotated[
    Path,
    typer.Argument(help="results folder of a run, e.g. results/quickstart", show_default=False),
]
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-w",
        min=0,
        help="local dask workers, 0 to evaluate in this process "
        "(default: the study's execution.workers)",
    ),
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option("--scheduler", help="address of a running dask scheduler, e.g. tcp://host:8786"),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        "-p",
        show_default=False,
        help="a cluster profile (a name under workers/, or a path; "
        "`dse cluster NAME` shows it) instead of the study's execution",
    ),
]
DashboardOpt = Annotated[
    bool | None,
    typer.Option(
        "--dashboard/--no-dashboard",
        show_default=False,
        help="the dask dashboard (default: the study's execution.dashboard, "
        "on where bokeh is installed, off for a local run of under 10 s of evaluation)",
    ),
]


def _version(value: bool) -> None:
    if value:
        out.print(f"dse {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    """Search hardware, batch size, clock, topology and parallelism for the Pareto trade-off
    between energy, time, power and temperature of training a model."""


# -- progress display ---------------------------------------------------------------------------
class RichProgress:
    """Shows the run as chunks finish: candidates done of the total, evaluations per second,
    time left, failures, feasible count, front size, and the best value of each objective."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar: Progress | None = None
        self.task = None

    def start(self, total: int | None, description: str) -> None:
        self.bar = _LinesBelow(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self.bar.start()
        self.task = self.bar.add_task(description, total=total, pace="", best="")

    def advance(self, n: int, record: dict) -> None:
        from dse.cli.pace import progress_lines
        from dse.progress import clock_time

        if self.bar is None:
            return
        if record.get("phase"):  # the datasets written after the search: steps, time left
            self.bar.update(
                self.task,
                advance=n,
                total=record.get("total") or None,
                pace=f"{record['phase']}, {clock_time(record.get('eta_s'))} left",
                best="",
            )
            return
        pace, best = progress_lines(record)
        self.bar.update(self.task, advance=n, pace=pace, best=best)

    def note(self, text: str) -> None:
        (self.bar.console if self.bar is not None else self.console).print(
            escape(text), highlight=False
        )

    def stop(self) -> None:
        if self.bar is not None:
            task = self.bar.tasks[0] if self.bar.tasks else None
            if task is not None and task.total is not None and task.completed < task.total:
                # the search ended below its budget (a converged polish, a stop): the last line
                # shows what was done, not a bar short of a total that was never reached
                self.bar.update(self.task, total=task.completed)
            self.bar.stop()


class _LinesBelow(Progress):
    """The bar, done/total and elapsed time on one line, the pace and the best values on
    lines of their own below it: in a narrow terminal the long lines are cut at its edge
    instead of squeezing the bar and the count out of the first line."""

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        for task in self.tasks:
            for line in (task.fields.get("pace"), task.fields.get("best")):
                if line:
                    yield Text("  " + line, no_wrap=True, overflow="ellipsis")


class _Notes:
    """Without a progress display (``--quiet``) the notes are still printed: a dashboard's
    address, a lost cluster."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def start(self, total: int | None, description: str) -> None: ...
    def advance(self, n: int, record: dict) -> None: ...
    def stop(self) -> None: ...

    def note(self, text: str) -> None:
        self.console.print(escape(text), highlight=False)


def _progress(quiet: bool):
    console = _call().err  # the console itself: a display thread has no call context
    if quiet:
        return _Notes(console)
    if not console.is_terminal:  # a batch job's log, a pipe: plain lines every ~10 s or 10 %
        from dse.progress import LineProgress

        return LineProgress(lambda line: console.print(escape(line), highlight=False))
    return RichProgress(console)


# -- commands -------------------------------------------------------------------------------------
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="results folder (default: the study's "
        "output.path, else results/NAME with the study's name)",
    ),
]
OverwriteOpt = Annotated[
    bool, typer.Option("--overwrite", help="replace an existing run in the results folder")
]


@app.command()
def validate(
    study: StudyArg,
    workers: WorkersOpt = None,
    scheduler: SchedulerOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = None,
    overwrite: OverwriteOpt = False,
    no_plugins: Annotated[
        bool,
        typer.Option(
            "--no-plugins",
            help="read the study only: import no plug-in, start nothing (docs/security.md)",
        ),
    ] = False,
) -> None:
    """Check a study without running it: everything `dse run` refuses.

    Schema, parameters and values, metrics, search algorithm and options, budget, cluster
    settings and the results folder (give the same --output and --overwrite as to `dse run`)."""
    if (
        no_plugins
    ):  # an untrusted study: dse.trust says what it would do, importing none of its code
        from dse.trust import check_without_plugins

        out.print(
            "\n".join(check_without_plugins(study, output, overwrite=overwrite)),
            markup=False,
            highlight=False,
        )
        return
    from dse.api import check_run

    p = check_run(
        _on_profile(study, profile),
        output,
        overwrite=overwrite,
        workers=workers,
        scheduler=scheduler,
        here=False,
    )
    for warning in p.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)
    s, space, seen = p.study, p.space, p.preview
    size = "continuous" if math.isinf(space.size) else _count(int(space.size), "candidate")
    budget = (
        f"budget {s.search.budget}"
        if p.search.total is None
        else f"{_count(p.search.total, 'evaluation')} (budget {s.search.budget})"
    )
    if space.indexable and (
        p.search.total is None or p.search.total > space.size
    ):  # a search ends there
        budget = f"{_count(int(space.size), 'evaluation')} at most: the whole space (budget {s.search.budget})"
    where = p.execution.describe()
    where = where if where.startswith("in ") else f"on {where}"
    out.print(
        f"[green]ok[/green] {study}: study '{s.name}', {_count(len(space.parameters), 'parameter')} "
        f"({size}), search {p.search.description}, {budget}, evaluated {where}, "
        f"objectives: {', '.join(f'{o.direction} {o.metric}' for o in s.objectives)}"
    )
    if seen is None:
        out.print(
            f"preview: none (evaluator '{p.evaluator.name}' does not allow one: it may be slow or have side "
            "effects); whether any candidate is feasible shows in the run"
        )
    elif seen.feasible and not seen.failed:
        noun = "candidate" if seen.whole_space else "sampled candidate"
        out.print(
            f"preview: {seen.feasible:,} of {_count(seen.evaluated, noun)} feasible and within the constraints"
        )


@app.command()
def run(
    study: StudyArg,
    workers: WorkersOpt = None,
    scheduler: SchedulerOpt = None,
    profile: ProfileOpt = None,
    output: OutputOpt = None,
    overwrite: OverwriteOpt = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="no progress display (the run line and the front are still printed)",
        ),
    ] = False,
    dashboard: DashboardOpt = None,
) -> None:
    """Run a study: search the design space on dask workers and write the Pareto set."""
    from dse import api

    p = api.check_run(
        _on_profile(study, profile),
        output,
        overwrite=overwrite,
        workers=workers,
        scheduler=scheduler,
        dashboard=dashboard,
    )
    _quiet_libraries(p)
    progress = _progress(quiet)
    err.print(
        f"dse {__version__}: study [bold]{p.study.name}[/bold] → {p.output_dir} "
        f"({p.search.description}, budget {p.study.search.budget}, {p.execution.describe()})"
    )
    _run_and_finish(
        lambda prepare: api.run(p, progress=progress, prepare=prepare, summarize=_summarize), p
    )


def _summarize(results: Path, map_each):
    """What the figure reads of every evaluation, made by the run's workers (issue 37)."""
    from dse.outputs.plot import figure_summary

    return figure_summary(results, map_each)


@app.command()
def resume(
    results: ResultsArg,
    workers: WorkersOpt = None,
    scheduler: SchedulerOpt = None,
    profile: ProfileOpt = None,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="no progress display (the run line and the front are still printed)",
        ),
    ] = False,
    dashboard: DashboardOpt = None,
) -> None:
    """Continue an interrupted run where it stopped: nothing is evaluated twice."""
    from dse import api

    stored = api.open_results(results)
    study = _on_profile(api.stored_study(stored), profile) if profile is not None else None
    p = api.plan_resume(
        stored, study=study, workers=workers, scheduler=scheduler, dashboard=dashboard
    )
    _quiet_libraries(p)
    progress = _progress(quiet)
    stored.store.check_unlocked()  # another dse writing there: say so before "resuming"
    state = stored.state()
    if state.finished:
        err.print(
            f"{p.study.name} in {results} had finished ({stored.log_rows} evaluations): nothing is left "
            "to evaluate; its datasets are checked and written again where needed"
        )
    else:
        err.print(
            f"resuming {p.study.name} in {results}: {stored.log_rows} evaluations stored, "
            f"{state.batch} batches done; evaluating: {p.execution.describe()}"
        )
    _run_and_finish(lambda prepare: api.resume(p, progress=progress, prepare=prepare), p)


def _on_profile(study, profile: str | None):
    """The study (a path or a loaded Study) to run on cluster profile ``profile`` instead of
    its own execution; a path given here is the caller's (relative to the working folder)."""
    if profile is None:
        return study
    from dse.execution.plan import find_profile, names_a_path
    from dse.study import Study, load_study

    s = study if isinstance(study, Study) else load_study(study)
    where = Path(profile)
    value = str(where.resolve()) if names_a_path(profile) and where.is_file() else profile
    try:
        find_profile(value, s.source_path or None)
    except DseError as exc:  # named as the option it is here, not as the study's field
        raise DseError(exc.message, field="--profile", allowed=exc.allowed) from None
    # the command line's profile replaces where the study runs: its scheduler and worker count too
    return s.with_execution(profile=value, scheduler=None, workers=None)


def _quiet_libraries(plan) -> None:
    """The command line shows its own progress: optuna's per-trial log lines are turned down
    here (the library itself leaves every logging level as it finds it)."""
    if plan.search.driver_cls.__module__.startswith("dse.search.optuna") or "optuna" in sys.modules:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)


_count = counted


def _stopped_by(signum: int | None) -> tuple[str, int]:
    """What stopped a run and its exit code, as a shell reports the signal: Ctrl-C (None)
    "interrupted", 130; SIGTERM or SIGHUP "terminated (SIGTERM)", 128 + the signal."""
    if not signum:
        return "interrupted", 130
    return f"terminated ({signal.Signals(signum).name})", 128 + signum


def _run_and_finish(run, plan) -> None:
    """``run(prepare)`` (a run or a resume), then :func:`_finish`; matplotlib is imported
    while the run waits on its workers, so that the front is drawn sooner at the end. (A
    child forked before the cluster started, to draw there, was tried and removed: under load
    a Ctrl-C during the cluster's start then left dask's IO loop unstarted for 10 s and ended
    in a traceback, in 8 of 12 tries.)"""
    _finish(run(_plotting_ready), plan)


def _plotting_ready() -> None:
    """What :func:`_finish` draws with, imported while the run waits on its workers (matplotlib:
    about 0.7 s of CPU on 2 idle cores, most of the time after the run's last batch before)."""
    import matplotlib

    matplotlib.use("Agg")  # as the plot chooses it (dse.outputs.plot.front_figure)
    import matplotlib.pyplot  # noqa: F401

    import dse.outputs.plot  # noqa: F401


def _finish(result, plan) -> None:
    """Draw the front, print it, and end with the right exit code."""
    from dse.runner import resume_command

    n = result.counts.get("evaluations", 0)
    # an interrupted run is not drawn: Ctrl-C asks to stop now (matplotlib takes seconds to
    # start), and `dse resume` draws the finished front
    if len(result.front) and result.datasets_written and not result.interrupted:
        try:
            signals.raise_lost_interrupt()  # a Ctrl-C Python could not raise while the datasets were written
            _draw(result.output_dir, result.summary)
            signals.raise_lost_interrupt()
        except KeyboardInterrupt as exc:
            if not result.interrupted:  # the run is over and written: only the picture is missing
                what, code = _stopped_by(
                    getattr(exc, "signum", None)
                )  # dse.runner.Terminated has one
                err.print(
                    f"[yellow]{what}[/yellow]: the run is complete ({n:,} evaluations, {len(result.front)} on "
                    f"the front, in {result.output_dir}) but pareto.png was not drawn; `dse plot "
                    f"{result.output_dir}` draws it, `dse show {result.output_dir}` prints the front"
                )
                _call().interrupted = True
                raise typer.Exit(code) from None
    if result.interrupted:
        what, code = _stopped_by(result.signum if result.terminated else None)
        if not result.datasets_written:
            what += " while pareto.nc was written (resume writes it)"
        err.print(
            f"[yellow]{what}[/yellow]: {n:,} evaluations are kept in "
            f"{result.output_dir}. Continue with: [bold]{resume_command(result.output_dir, plan.execution)}[/bold]"
        )
        _call().interrupted = True
        raise typer.Exit(code)
    if len(result.front) == 0:
        lines = (
            "; ".join(f"{r} ({_count(c, 'candidate')})" for r, c in result.ruled_out[:5])
            or "no evaluations"
        )
        raise DseError(
            f"no feasible candidate among {n} evaluations: {lines}; they are kept in "
            f"{result.output_dir} (`dse status {result.output_dir}`)"
        )
    _print_front(result.front, plan)
    c, labels = result.counts, result.labels
    front = (
        f", {labels['front']}"
        + (f": {labels['front_detail']}" if labels.get("front_detail") else "")
        if labels.get("front")
        else ""
    )
    hv = (
        f"; hypervolume {result.history[-1].hypervolume:.4f} (normalised to this run's "
        "first front: not comparable across runs, `dse compare` puts runs in one frame)"
        if result.history
        else ""
    )
    out.print(
        f"{n:,} evaluations ({c.get('feasible', 0):,} feasible and within the constraints, "
        f"{c.get('failed', 0):,} failed); {len(result.front):,} on the Pareto front{front}{hv}.",
        highlight=False,
    )
    out.print(
        f"Pareto set: {result.output_dir / 'pareto.nc'}   all evaluations: "
        f"{result.output_dir / 'evaluations'} (`dse export --all`)   plot: "
        f"{result.output_dir / 'pareto.png'}"
    )
    _call().ended = True  # the run has said how it ended: a Ctrl-C now has nothing left to stop


def _draw(results: Path, summary=None) -> None:
    """``pareto.png`` of ``results`` (``summary``: what the run's workers read of its log for
    it, :func:`dse.outputs.plot.figure_summary`)."""
    from dse.outputs.plot import plot_results

    plot_results(results, summary=summary)


def _print_front(front, plan, limit: int = 25) -> None:
    from dse.outputs.show import in_display_units, print_tables

    study, ev, space = plan.study, plan.evaluator, plan.space
    metric_cols = [o.metric for o in study.objectives]
    metric_cols += [c.metric for c in study.constraints if c.metric not in metric_cols]
    stored = {n: ev.metrics[n].unit or "1" for n in metric_cols}
    stored.update(
        {
            n: None
            if n in space.bundles or ev.inputs[n].kind in ("str", "bool")
            else ev.inputs[n].unit or "1"
            for n in space.names
        }
    )
    names = [*metric_cols, *space.names]
    rows, units = in_display_units(front.head(limit), names, stored, study.display_units)
    title = (
        f"Pareto front of {study.name} ({len(front)} points"
        + (f", first {limit} shown" if len(front) > limit else "")
        + ")"
    )
    print_tables(_call().out, title, rows, names, units)


@app.command()
def evaluate(
    study: StudyArg,
    candidates: Annotated[
        Path,
        typer.Option(
            "--candidates",
            "-c",
            help="CSV with one candidate per row; columns named as the study's parameters",
        ),
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="CSV to write: the candidates with every metric")
    ],
    trajectory: Annotated[
        Path | None,
        typer.Option(
            "--trajectory",
            help="CSV to write as well: each candidate's run from its start to its end, at "
            "--points moments: tokens consumed, the loss reached (nats per token), the batch, "
            "time (s) and energy (J) so far (the units end each column's name; docs/model.md, "
            "section 8b). Evaluators that give trajectories only (analytic)",
        ),
    ] = None,
    points: Annotated[
        int,
        typer.Option(
            "--points",
            min=2,
            max=100_000,
            help="moments per candidate in --trajectory, evenly spaced in tokens from 0 to "
            "the run's end (2 to 100,000)",
        ),
    ] = 50,
) -> None:
    """Evaluate given candidates (CSV) and write every metric (CSV), without searching."""
    from dse.api import plan
    from dse.cli.evaluate import evaluate_csv, write_evaluated, write_trajectory
    from dse.evaluators import has_trajectory
    from dse.outputs.export import sidecar_of

    p = plan(study)
    s = p.study  # checked, its values in the evaluator's spelling
    _check_output_file(
        output,
        [candidates, study],
        "the candidates or the study",
        folder_creatable=True,
        example="evaluated.csv",
    )
    sidecar = sidecar_of(output)  # written beside the CSV
    if trajectory is not None:
        if not has_trajectory(p.evaluator):
            raise DseError(
                f"evaluator '{p.evaluator.name}' gives no trajectory (its class has no "
                "trajectory() method, docs/evaluators.md)",
                field="--trajectory",
                value=str(trajectory),
                allowed="an evaluator that gives one (analytic), or no --trajectory",
            )
        _check_output_file(
            trajectory,
            [candidates, study, output, sidecar],
            "the candidates, the study or --output's files",
            folder_creatable=True,
            field="--trajectory",
            example="trajectory.csv",
        )
        _check_csv_suffix(trajectory, "--trajectory")
    if any(sidecar.resolve() == Path(i).resolve() for i in (candidates, study)):
        raise DseError(
            f"its description file {sidecar.name} would overwrite the candidates or the study",
            field="--output",
            value=str(output),
            allowed="another file name",
        )
    _check_csv_suffix(output, "--output")
    table, defaulted, blanks = evaluate_csv(p, candidates)
    sidecar = write_evaluated(table, p.evaluator, output, s)
    if trajectory is not None:
        write_trajectory(table, p.evaluator, trajectory, points)
    n_ok = int(table["meets_constraints"].sum())
    n_failed = int((table["status"] != "ok").sum())
    if defaulted:  # documented, but worth a word: a searched parameter took the evaluator's default
        err.print(
            f"note: {candidates} has no column for the study's searched parameter(s) {', '.join(defaulted)}: "
            "the evaluator's defaults were used",
            highlight=False,
        )
    if blanks:  # an empty cell of a searched parameter: its default, as written in OUTPUT
        err.print(
            f"note: empty cells in {candidates} took the evaluator's defaults: "
            + ", ".join(
                f"{n} ({_count(k, 'row')}, {p.evaluator.inputs[n].default})"
                for n, k in blanks.items()
            ),
            highlight=False,
        )
    if n_failed == len(
        table
    ):  # nothing evaluated: a failure for scripts too (the errors are in the file)
        raise DseError(
            f"every candidate failed ({table['error'].iloc[0]}); the errors are in {output}"
        )
    out.print(
        f"{_count(len(table), 'candidate')} evaluated ({n_ok:,} feasible and within the constraints"
        + (f", {n_failed:,} failed: see the error column" if n_failed else "")
        + f") → {output} "
        f"(units and descriptions in {sidecar.name})"
        + (f"; trajectories ({points:,} points each) → {trajectory}" if trajectory else "")
    )


def _check_csv_suffix(output: Path, field: str) -> None:
    """Any file type but CSV (.parquet, .xlsx) is refused, as export refuses one it does not
    write; no suffix, or a dot inside the name (gpt-1.3b), is CSV under that name."""
    from dse.outputs.export import SUFFIX

    suffix = output.suffix.lower()
    if suffix != ".csv" and (suffix in SUFFIX.values() or names_a_file_type(suffix)):
        raise DseError(
            f"dse evaluate writes CSV, not {output.suffix}",
            field=field,
            value=str(output),
            allowed="a .csv file (dse export writes Parquet, netCDF, zarr or JSON from a run)",
        )


def _check_output_file(
    output: Path,
    inputs: list[Path],
    what: str,
    *,
    folder_creatable: bool = False,
    field: str = "--output",
    example: str = "output.csv",
) -> None:
    """Refuse, before any work, an output file that would replace an input or is a folder
    (``folder_creatable``: or whose missing folders cannot be made, a file being in the way;
    missing ones are made when it is written, as ``dse export`` makes them), or a device,
    pipe or socket."""
    from dse.outputs.target import (
        refuse_a_run_file,
        refuse_blocked_folder,
        refuse_link_on_the_way,
        refuse_standard_output,
    )

    refuse_standard_output(output)
    why = not_a_file(output)
    if why:
        raise DseError(why, field=field, value=str(output))
    refuse_link_on_the_way(output, field)  # before the evaluation, not after it
    refuse_a_run_file(output, field)  # a results folder's log folder, as export refuses it
    if output.is_dir():
        raise DseError(
            "is a folder; give a file name",
            field=field,
            value=str(output),
            allowed=f"a file path, e.g. {output / example}",
        )
    if any(output.resolve() == Path(i).resolve() for i in inputs):
        raise DseError(
            f"would overwrite {what}",
            field=field,
            value=str(output),
            allowed="another file name",
        )
    if folder_creatable:
        refuse_blocked_folder(output, field)


class ExportFormat(StrEnum):
    csv = "csv"
    parquet = "parquet"
    netcdf = "netcdf"
    zarr = "zarr"
    json = "json"


@app.command()
def export(
    results: ResultsArg,
    fmt: Annotated[
        ExportFormat | None,
        typer.Option(
            "--format",
            "-f",
            case_sensitive=False,
            help="file format: csv, parquet, netcdf, zarr or json (default: the one --output's suffix names; without --output, csv)",
        ),
    ] = None,
    front: Annotated[
        bool,
        typer.Option(
            "--front/--all",
            help="the Pareto set (default) or every evaluation the run kept (output.keep)",
        ),
    ] = True,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="file to write (default: pareto.FORMAT or evaluations.FORMAT in the results folder)",
        ),
    ] = None,
    units_row: Annotated[
        bool, typer.Option("--units-row", help="CSV: a second header row with each column's unit")
    ] = False,
) -> None:
    """Export the Pareto set or every evaluation as CSV, Parquet, netCDF, zarr or JSON.

    CSV always comes with a CSV-on-the-Web sidecar FILE-metadata.json giving units and
    descriptions."""
    from dse.outputs.export import export_results
    from dse.results import DATASETS

    path = export_results(
        results, fmt.value if fmt else None, front=front, output=output, units_row=units_row
    )
    if (
        front and path.resolve() == (results / DATASETS[front]).resolve()
    ):  # netCDF: the run's own file, not written again
        out.print(
            f"{path} already holds {'the Pareto set' if front else 'every evaluation'} in netCDF, as the run "
            "wrote it: nothing to write"
        )
    else:
        out.print(f"wrote {path}")
    if not front:  # a run that kept less than every evaluation says so (what was left out is gone)
        from dse.results import open_results

        stored = open_results(results)
        policy = stored.study.output.keep
        if policy != "all":
            with stored.open_dataset(front=False, keep=[]) as ds:
                evaluated = int(ds.attrs.get("evaluations", stored.log_rows))
                exported = ds.sizes["candidate"]
            kept = "the front's" if policy == "front" else "the feasible"
            err.print(
                f"note: the run kept {kept} evaluations only (output.keep: {policy}): "
                f"{exported:,} of the {evaluated:,} evaluated",
                highlight=False,
            )


@app.command()
def plot(
    results: ResultsArg,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="figure to write: .png, .svg or .pdf (default: pareto.png in the results folder)",
        ),
    ] = None,
) -> None:
    """Plot the Pareto front over every feasible evaluation, one panel per pair of objectives."""
    from dse.outputs.plot import plot_results

    out.print(f"wrote {plot_results(results, output)}")


@app.command()
def report(
    results: ResultsArg,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="HTML file to write (default: report.html in the results folder)"
        ),
    ] = None,
    static: Annotated[
        bool,
        typer.Option(
            "--static", help="also write the figures as PNG and SVG beside it (for papers)"
        ),
    ] = False,
    sample: Annotated[
        int,
        typer.Option(
            "--sample",
            min=0,
            help="dominated and infeasible candidates drawn at most (a uniform random sample)",
        ),
    ] = 10_000,
) -> None:
    """Write a self-contained HTML report of the trade-off (opens from disk, no network)."""
    from dse.outputs.report import report_results

    for path in report_results(results, output, sample_size=sample, static=static):
        out.print(f"wrote {path}")


@app.command()
def show(
    results: ResultsArg,
    sort: Annotated[
        str | None,
        typer.Option(
            "--sort", "-s", help="column to sort the front by (default: the first objective)"
        ),
    ] = None,
    descending: Annotated[
        bool | None,
        typer.Option(
            "--descending/--ascending",
            help="sort from the largest or the smallest value (default: an objective's best first, else ascending)",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="rows shown at most")] = 50,
    plot: Annotated[
        bool | None,
        typer.Option(
            "--plot/--no-plot",
            help="a terminal plot of the front (default: when the terminal is wide enough)",
        ),
    ] = None,
) -> None:
    """Print the Pareto front as a table with units, sorted by any column, and a small plot."""
    from dse.outputs.show import show_front

    show_front(results, _call().out, sort=sort, descending=descending, limit=limit, plot=plot)


@app.command()
def sensitivity(
    results: ResultsArg,
    at: Annotated[
        str,
        typer.Option(
            "--at",
            "-a",
            help="the design: knee, best-energy, best-time, best-METRIC (an objective), "
            "or a front candidate's key (`dse export`'s key column)",
        ),
    ] = "knee",
    global_samples: Annotated[
        int | None,
        typer.Option(
            "--global",
            "-g",
            min=0,
            show_default=False,
            help="evaluations of the variance-based (Sobol') indices over the whole space, "
            "at least; 0: none (default: 10,000 where the evaluator is cheap, i.e. allows a "
            "preview, else none)",
        ),
    ] = None,
    step: Annotated[
        float,
        typer.Option(
            "--step", help="relative step of the central differences on a real-valued knob"
        ),
    ] = 1e-3,
    fixed: Annotated[
        bool,
        typer.Option(
            "--fixed/--no-fixed",
            help="the study's fixed real-valued inputs (bandwidths, PUE, ...) are knobs too",
        ),
    ] = False,
    top: Annotated[
        int, typer.Option("--top", "-n", min=1, help="knobs shown in the breakdown tables")
    ] = 5,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            "-w",
            help="NAME=VALUE, repeatable: take --at on the front of the run's feasible "
            "evaluations with these knob values (one layout, say) instead of the run's front",
        ),
    ] = None,
) -> None:
    """Marginal efficiency of one design of a run's front: the elasticity of each objective
    (and constrained metric) to each knob, d ln E / d ln x and d ln T / d ln x, from the
    study's evaluator run again in this process (central differences on a real-valued
    knob, an arc elasticity between the study's neighbouring values of a whole-number one,
    the change to each other value of a text one), ranked; the energy and time breakdown
    that explains them; and variance-based indices over the whole space."""
    from dse.outputs.sensitivity import print_sensitivity
    from dse.outputs.sensitivity import sensitivity as analyse

    chosen = {}
    for item in where or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise DseError(
                "expected NAME=VALUE", field="--where", value=item, allowed="e.g. zero_stage=3"
            )
        chosen[name.strip()] = value.strip()
    result = analyse(
        results,
        at,
        global_samples=global_samples,
        step=step,
        include_fixed=fixed,
        where=chosen or None,
    )
    print_sensitivity(result, _call().out, top=top)


@app.command()
def compare(
    results: Annotated[
        list[Path],
        typer.Argument(
            help="results folders of two runs or more with the same objectives",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="figure of the fronts in one frame: .png, .svg or .pdf (default: compare.png here)",
        ),
    ] = None,
) -> None:
    """Compare runs: evaluations spent, front size, hypervolume in one common frame, which
    run's front dominates which, and their fronts drawn in one frame."""
    from dse.outputs.compare import compare_runs, labels, write_compare_figure
    from dse.outputs.target import output_path

    target = Path("compare.png") if output is None else output
    for r in results:
        output_path(target, target, r)  # never over one of the runs' own files
    c = compare_runs(results)
    names = labels(c)
    table = Table(title="runs compared (hypervolume in the common frame below)")
    table.add_column("run")
    table.add_column(escape("evaluations [1]"), justify="right")
    table.add_column(escape("front [points]"), justify="right")
    table.add_column(escape("hypervolume, common frame [1]"), justify="right")
    for name, run in zip(names, c.runs, strict=True):
        table.add_row(
            escape(name), f"{run.evaluations:,}", f"{run.front_size:,}", f"{run.hypervolume:.4f}"
        )
    out.print(table)
    out.print(escape(c.frame()), highlight=False)
    for line in c.differences:  # fronts of different workloads, compared as they are
        err.print(f"[yellow]note:[/yellow] {escape(line)}", highlight=False, soft_wrap=True)
    dom = Table(title="front points of the row's run dominated by the column's run's front")
    dom.add_column("dominated ↓ by →")
    for name in names:
        dom.add_column(escape(name), justify="right")
    for i, (name, run, row) in enumerate(zip(names, c.runs, c.dominated, strict=True)):
        dom.add_row(
            escape(name),
            *("-" if i == k else f"{n} of {run.front_size}" for k, n in enumerate(row)),
        )
    out.print(dom)
    out.print(f"wrote {write_compare_figure(c, target)}")


@app.command()
def status(results: ResultsArg) -> None:
    """Show a run's progress: evaluations, failures, front size and the hypervolume history."""
    from dse.cli.status import show_status

    show_status(results, _call().out)


@app.command()
def cluster(
    profile: Annotated[
        str, typer.Argument(help="a profile under workers/ (name or path)", show_default=False)
    ],
    study: Annotated[
        Path | None, typer.Option("--study", help="look the profile up as this study would")
    ] = None,
) -> None:
    """Check a cluster profile and show what it would start; nothing is submitted.

    The batch job script of a SLURM or PBS profile (dask-jobqueue), the DaskCluster resource
    of a Kubernetes one."""
    from dse.execution.deploy import check_job
    from dse.execution.plan import find_profile, plan_execution
    from dse.study import ExecutionSpec, load_study

    if study is not None:
        if not study.is_file():
            raise DseError("no such study file", field="--study", value=str(study))
        load_study(study)  # bad YAML or fields: refused as dse validate refuses them
    try:
        path = find_profile(profile, study)
    except DseError as exc:  # named as the argument it is here, not as a study's field
        raise DseError(exc.message, allowed=exc.allowed) from None
    try:
        p = plan_execution(ExecutionSpec(profile=str(path)), study_path=study)
    except DseError as exc:
        if exc.field != "execution.profile":  # a study's field: here the profile is an argument
            raise
        raise DseError(
            exc.message,
            file=exc.file,
            value=exc.value,
            has_value=exc.has_value,
            allowed=exc.allowed,
        ) from None
    shown = (
        check_job(p) if p.kind == "cluster" else None
    )  # before "ok": the class may refuse its options
    out.print(f"[green]ok[/green] {path}: evaluated on {escape(p.describe())}", highlight=False)
    if shown:
        out.print(f"{shown[0]}:")
        out.print(shown[1], markup=False, highlight=False, soft_wrap=True)


@app.command("validate-model")
def validate_model(
    tables: Annotated[
        list[Path],
        typer.Argument(
            help="CSVs of measured runs in the validate-model format (docs/model.md, section 9)",
            show_default=False,
        ),
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="print the per-source report as JSON")
    ] = False,
    rows: Annotated[bool, typer.Option("--rows", help="also print every row's prediction")] = False,
    worst: Annotated[int, typer.Option("--worst", min=0, help="worst rows to list per source")] = 3,
) -> None:
    """Check the analytic model against measured runs: per-source error and worst rows.

    Per source the median, mean and max error, the worst rows, and the rows the model finds
    infeasible apart."""
    from dse.analytic.validation import validate_model as check

    raise typer.Exit(check(tables, as_json, rows, worst))


@app.command()
def describe(
    evaluator: Annotated[
        str, typer.Option("--evaluator", "-e", help="evaluator name or module:attribute")
    ] = "analytic",
    search: Annotated[
        str | None,
        typer.Option(
            "--search",
            "-s",
            help="describe this search algorithm's options instead "
            "('list': every registered algorithm)",
        ),
    ] = None,
    accelerator: Annotated[
        str | None,
        typer.Option(
            "--accelerator",
            "-a",
            help="describe an accelerator instead: every number of a catalog part or an "
            "accelerator profile (a .yaml path or a name) with where it came from",
        ),
    ] = None,
    study: Annotated[
        Path | None,
        typer.Option(
            "--study",
            help="describe the evaluator of this study, built with the study's evaluator.options "
            "(an evaluator such as command takes its parameters from its options)",
        ),
    ] = None,
) -> None:
    """List parameters and metrics, search algorithms, or an accelerator's numbers.

    An evaluator's parameters (with units, defaults, allowed values) and metrics, or the
    search algorithms and their options, or an accelerator's numbers and their sources."""
    from dse.evaluators import load_evaluator
    from dse.study import EvaluatorSpec

    chosen = [
        o
        for o, given in (
            ("--search", search is not None),
            ("--accelerator", accelerator is not None),
            ("--study", study is not None),
            ("--evaluator", evaluator != "analytic"),
        )
        if given
    ]
    if len(chosen) > 1:
        raise DseError(
            f"{' and '.join(chosen)} describe different things; give one", field=chosen[1]
        )
    if search is not None:
        _describe_search(search)
        return
    if accelerator is not None:
        from dse.cli.calibrate import describe_accelerator

        describe_accelerator(accelerator, _call().out)
        return
    if study is not None:
        from dse.study import load_study

        s = load_study(study)
        try:
            ev = load_evaluator(s.evaluator)
        except DseError as exc:
            raise exc.with_file(str(study)) from None
    else:
        try:
            ev = load_evaluator(EvaluatorSpec(name=evaluator))
        except DseError as exc:
            if not str(exc.field or "").startswith("evaluator.options"):
                if exc.field == "evaluator.name":  # the name came from the command line here
                    exc.field = "--evaluator"
                    exc.args = (exc.render(),)
                raise
            raise DseError(
                f"evaluator '{evaluator}' cannot be built without options ({exc}); describe it as a "
                "study configures it: dse describe --study STUDY"
            ) from None
    t = Table(title=f"parameters of evaluator '{ev.name}' {ev.version}")
    for col in ("name", "unit", "default", "allowed", "description"):
        t.add_column(col, overflow="fold")  # a value is never cut
    attributes = ev.attributes()
    estimated = {
        n.strip()
        for n in attributes.get("analytic_efficiencies_estimated", "").split(",")
        if n.strip()
    }
    for inp in ev.inputs.values():
        allowed = (
            ", ".join(f"{c} (estimated)" if c in estimated else str(c) for c in inp.choices)
            if inp.choices
            else inp._allowed()
        )
        unit = inp.unit or ("1" if inp.kind in ("int", "float") else "-")
        default = "(the model decides)" if inp.default is None else str(inp.default)
        t.add_row(inp.name, unit, default, allowed, inp.description)
    out.print(t)
    if type(ev).Options is not None:
        _options_table(f"options of evaluator '{ev.name}' (evaluator.options)", type(ev).Options)
    if attributes:
        a = Table(title="evaluator attributes (also in the result datasets)")
        for col in ("attribute", "value"):
            a.add_column(col, overflow="fold")  # a value is never cut
        for key, value in attributes.items():
            a.add_row(key, str(value))
        out.print(a)
    m = Table(title="metrics")
    for col in ("name", "unit", "description"):
        m.add_column(col, overflow="fold")  # a value is never cut
    for met in ev.metrics.values():
        m.add_row(met.name, met.unit, met.long_name)
    out.print(m)


@app.command()
def calibrate(
    measurements: Annotated[
        list[Path],
        typer.Argument(
            help="measurement files: sweep CSVs (dse profile writes them), validate-model tables, training steps CSVs, "
            "nvidia-smi CSV logs and DCGM/Prometheus text (docs/calibration.md)",
            show_default=False,
        ),
    ],
    accelerator: Annotated[
        str,
        typer.Option(
            "--accelerator",
            "-a",
            help="the part measured: a catalog name (or a "
            "profile) whose other numbers the profile inherits",
        ),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="profile to write (YAML); in ./accelerators/ it is found by name"
        ),
    ],
    holdout: Annotated[
        str,
        typer.Option(
            "--holdout",
            help="rows left out of the fit and reported apart: clocks in "
            "MHz, power caps in W (300W) or workload names, comma-separated",
        ),
    ] = "",
    only: Annotated[
        str,
        typer.Option(
            "--fit",
            help="fit only these parameters (comma-separated; default: all "
            "the measurements determine)",
        ),
    ] = "",
    fix: Annotated[
        str, typer.Option("--fix", help="keep these parameters at the base part's values")
    ] = "",
    cooling: Annotated[
        str,
        typer.Option(
            "--cooling",
            help="cooling of the measured GPUs (the thermal resistance "
            "fitted from temperatures is this one's): air or liquid",
        ),
    ] = "air",
    name: Annotated[
        str | None, typer.Option("--name", help="the profile's name (default: the file's stem)")
    ] = None,
) -> None:
    """Fit one accelerator's parameters to your measurements and write its profile.

    A study can use the profile as its accelerator. Prints the fitted values with
    uncertainties and the error of every measurement (held-out rows apart)."""
    from dse.cli.calibrate import calibrate as run_fit

    if cooling not in ("air", "liquid"):
        raise DseError("unknown cooling", field="--cooling", value=cooling, allowed="air, liquid")
    _check_output_file(output, measurements, "a measurement file", example="profile.yaml")

    def listed(text: str) -> list[str]:
        return [t.strip() for t in text.split(",") if t.strip()]

    run_fit(
        measurements,
        accelerator,
        output,
        holdout=listed(holdout),
        only=listed(only) or None,
        fix=listed(fix),
        cooling=cooling,
        name=name,
        command="dse " + " ".join(_call().argv),
        console=_call().out,
    )


@app.command()
def profile(
    output: Annotated[
        Path, typer.Option("--output", "-o", help="sweep CSV to write (dse calibrate reads it)")
    ] = Path("profile.csv"),
    device: Annotated[
        int, typer.Option("--device", "-d", min=0, help="GPU index (as nvidia-smi numbers them)")
    ] = 0,
    seconds: Annotated[
        float, typer.Option("--seconds", min=0.5, help="seconds each measurement runs")
    ] = 5.0,
    append: Annotated[
        bool,
        typer.Option(
            "--append",
            help="add the rows to an existing CSV (one per setting you sweep with nvidia-smi)",
        ),
    ] = False,
) -> None:
    """Measure this machine's NVIDIA GPU at its current settings (for dse calibrate).

    Idle and parked power, a matrix multiply and a memory-bound copy (time, power, energy)
    through NVML, written in the calibration CSV format. It never changes clocks or power
    limits (docs/calibration.md shows how to sweep them with nvidia-smi). Needs the extra
    dse[profile] (nvidia-ml-py, torch)."""
    from dse.analytic.calibration.measure import profile_gpu

    rows = profile_gpu(output, device=device, seconds=seconds, append=append, log=_call().err.print)
    out.print(
        f"wrote {len(rows)} rows to {output}: dse calibrate {output} --accelerator NAME -o my-gpu.yaml"
    )


def _describe_search(name: str) -> None:
    from dse.search import available_drivers, driver_class

    names = sorted(available_drivers()) if name == "list" else [name]
    for n in names:
        try:
            cls = driver_class(n)
        except DseError as exc:
            if exc.field == "search.algorithm":  # the name came from the command line here
                exc.field = "--search"
                exc.args = (exc.render(),)
            raise
        doc = " ".join((cls.__doc__ or "").split()).split(". ")[0].rstrip(".").replace("``", "")
        _options_table(
            f"search algorithm '{n}': {doc}",
            cls.Options,
            "(none)" if n != "auto" else "(those of the algorithm it chooses)",
        )


def _options_table(title: str, model, empty: str = "(none)") -> None:
    """A plug-in's options (a pydantic model): name, type, default and description."""
    t = Table(title=title)
    for col in ("option", "type", "default", "description"):
        t.add_column(col, overflow="fold")  # a value is never cut
    for key, f in model.model_fields.items():
        typ = getattr(f.annotation, "__name__", None) or str(f.annotation).replace("typing.", "")
        t.add_row(key, typ, repr(f.default), f.description or "")
    if not model.model_fields:
        t.add_row(empty, "", "", "")
    out.print(t)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default: this program's arguments) and return its exit
    code; a user error ends in one clear line on stderr and code 2, never a traceback.

    Callable in-process, any number of times: each call has its own consoles (on the
    standard streams as it finds them) and leaves the process as it found it. As an
    application (not the library) it chooses how much dask logs: warnings and errors, in
    the worker processes it starts, unless the user's own dask configuration
    (``DASK_LOGGING__DISTRIBUTED``) says otherwise; and turns optuna's per-trial log down."""
    call = _Call(list(sys.argv[1:] if argv is None else argv))
    token = _CALL.set(call)
    dask_logging = os.environ.get("DASK_LOGGING__DISTRIBUTED")
    optuna_level = _optuna_verbosity()
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    try:
        return _run_command(call)
    except SystemExit as exc:  # a closed pipe (_pipe_closed), a command's own exit
        if isinstance(exc.code, str):
            call.err.print(escape(exc.code), highlight=False)
        if isinstance(exc.code, int):
            return exc.code
        return 0 if exc.code is None else 1
    finally:
        if dask_logging is None:
            os.environ.pop("DASK_LOGGING__DISTRIBUTED", None)
        if optuna_level is not None:
            import optuna

            optuna.logging.set_verbosity(optuna_level)
        _CALL.reset(token)


def _optuna_verbosity() -> int | None:
    """optuna's logging level where optuna is imported (a command may turn it down)."""
    if "optuna" not in sys.modules:
        return None
    return sys.modules["optuna"].logging.get_verbosity()


@functools.cache
def _command():
    """The click command typer builds from :data:`app`, built once per process: building it
    reads every command's signature (about 16 ms), which each in-process call of :func:`main`
    paid again. (``app()`` builds it anew and installs typer's exception hook, which with
    ``pretty_exceptions_enable=False`` hands every exception to Python's own.)"""
    return typer.main.get_command(app)


def _run_command(call: _Call) -> int:
    """:func:`main`'s command, user errors turned into one line and an exit code."""
    err = call.err
    usage_error = typer.BadParameter.__mro__[1]  # click's UsageError, as typer vendors it
    try:
        code = _command().main(
            args=call.argv, prog_name="dse", standalone_mode=False
        )  # usage errors come here too
        if code == 130 and call.ended:  # Ctrl-C after the run's last line: it stands, exit code too
            code = 0
        elif code == 130 and not call.interrupted:  # typer makes Ctrl-C a silent Exit(130)
            err.print("interrupted")
        return code if isinstance(code, int) else 0  # a command's typer.Exit(code), else success
    except (
        usage_error
    ) as exc:  # a bad option value, an unknown option or command, a missing argument
        if (
            type(exc).__name__ == "NoArgsIsHelpError" and exc.ctx is not None
        ):  # `dse` alone: its help
            typer.echo(exc.ctx.get_help())
            return 2  # as click ends it
        command = exc.ctx.command_path if exc.ctx is not None else "dse"
        # an option's value the parser refused, in dse's words (no "Value error, " prefix,
        # "Input should be" as "expected"), as a study's values are refused
        head, said, why = exc.format_message().partition("': ")
        message = f"{head}{said}{pydantic_message(why)}" if said else head
        err.print(
            f"[red]error:[/red] {escape(message)} (`{escape(command)} --help` lists what is "
            "allowed)",
            highlight=False,
            soft_wrap=True,
        )
        return 2
    except typer.Abort:  # Ctrl-C outside a run (a run says itself what it kept)
        err.print("interrupted")
        return 130
    except DseError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except BrokenPipeError:  # the reader of the output went away (`dse status | head -1`)
        _pipe_closed()
    except OSError as exc:  # the file system said no (unwritable output, full disk, damaged file)
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        err.print(
            # one line: a file name's line end or escape sequence shown as its escape
            f"[red]error:[/red] {escape(printable(where + (exc.strerror or str(exc))))}",
            highlight=False,
            soft_wrap=True,
        )
        return 2
    except KeyboardInterrupt:
        if call.ended:  # after the run's last line: it stands, and so does its exit code
            return 0
        err.print("interrupted")
        return 130


def console() -> None:
    """The ``dse`` program: :func:`main`, then an immediate exit with its code. Every file a
    command writes is fsynced before it returns, so the interpreter's teardown of the large
    libraries a run loads (about 0.4 s) buys nothing. An unexpected exception still ends
    the ordinary way, with its traceback."""
    import logging
    import os

    from dse.allocator import arrow_on_system_heap

    arrow_on_system_heap()  # before anything imports pyarrow (dse.allocator imports nothing)
    signals.keep_lost_interrupts()  # a run raises them where it safely can
    _usable_streams()
    code = main()
    # the command is over and has said how it ended: a Ctrl-C now has nothing left to stop
    # (one that came here printed an "Exception ignored" traceback from a library's teardown)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.shutdown()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = PIPE_CLOSED
    try:
        sys.stderr.flush()
    except OSError:  # nowhere left to say anything
        pass
    os._exit(code)


#: the exit code of a command whose output's reader went away: 128 + SIGPIPE, as a shell
#: reports a program the pipe ended (``yes | head -1``)
PIPE_CLOSED = 141


def _pipe_closed() -> NoReturn:
    """Stop writing to a pipe whose reader went away: the rest of the output is dropped
    (no second BrokenPipeError when the interpreter flushes it), exit :data:`PIPE_CLOSED`
    (raised as SystemExit where rich found the closed pipe; :func:`main` returns it)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    raise SystemExit(PIPE_CLOSED)


if __name__ == "__main__":
    console()
