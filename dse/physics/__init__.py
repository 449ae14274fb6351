"""The physics: one module per phenomenon, each a set of small vectorised numpy functions.

Composition happens in :mod:`dse.physics.model`; the analytic evaluator wraps it.
"""
