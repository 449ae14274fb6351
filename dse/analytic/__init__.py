"""The analytic model of distributed transformer training: time, energy, power, thermal.

``dse.analytic.evaluator.AnalyticEvaluator`` is the plug-in (entry point ``analytic``);
:mod:`.declarations` holds its inputs and metrics with every default; :mod:`.model`
composes the two physics halves, :mod:`.time` (one module per phenomenon, composed by
:mod:`.time.model` into a :class:`~.time.result.TimeResult`) and :mod:`.energy`
(composed by :mod:`.energy.model`). ``data/`` holds the catalogs, the calibration and the
reference measurements; :mod:`.validation` and :mod:`.validate_energy` compare the model
with them (``dse validate-model``). The physics modules import numpy, pandas, yaml and
each other only, never the plug-in contract.
"""
