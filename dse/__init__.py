"""dse: multi-objective design-space exploration of large-model training infrastructure.

The public API (imported on first use, so ``import dse`` stays cheap)::

    dse.load_study(path)                  # read and check a study (a file, or a mapping)
    dse.check_run(study, output_dir=None) # everything a run checks, without running: a RunPlan
    dse.run(study, output_dir=None)       # search it; returns a RunResult
    dse.resume(results_dir)               # continue an interrupted run
    dse.open_results(results_dir)         # the datasets of a run
    dse.sensitivity(results_dir, at="knee") # elasticities of the objectives to each knob
    dse.Evaluator, dse.Input, dse.Metric  # the evaluator plug-in contract
    dse.SearchDriver, dse.Problem         # the search-driver plug-in contract
    dse.DriverOptions                     # the base of a driver's options model
    dse.Deployer                          # the cluster-deployer plug-in contract
    dse.DseError                          # what every dse failure raises (StudyError: bad input,
    dse.StudyError, dse.StoreError        #   naming the file and field; StoreError: a results folder)
"""

__version__ = "0.1.0"

_EXPORTS = {
    "load_study": "dse.api",
    "check_run": "dse.api",
    "run": "dse.api",
    "resume": "dse.api",
    "open_results": "dse.api",
    "sensitivity": "dse.outputs.sensitivity",
    "Evaluator": "dse.evaluators.base",
    "Input": "dse.evaluators.base",
    "Metric": "dse.evaluators.base",
    "SearchDriver": "dse.search.base",
    "Problem": "dse.search.base",
    "DriverOptions": "dse.search.base",
    "Deployer": "dse.execution.deployers.base",
    "DseError": "dse.errors",
    "StudyError": "dse.errors",
    "StoreError": "dse.errors",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dse' has no attribute {name!r}")
