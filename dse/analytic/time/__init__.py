"""The time half: workload, parallel layout, memory, step time and training length, one
module per phenomenon of small vectorised functions, composed by :mod:`.model`."""
