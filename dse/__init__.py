"""dse: multi-objective design-space exploration of large-model training infrastructure."""

__version__ = "0.1.0"
