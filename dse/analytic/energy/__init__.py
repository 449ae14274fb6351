"""The energy half: DVFS power, accelerator energy, the power-cap and thermal clock search,
junction temperature, checkpoints, facility power and economics, composed by :mod:`.model`."""
