"""The CBT 1 run simulator's parts, one job per module.

``clocks`` (node timebases and their true maps), ``records`` (the in-memory record table every
generator appends to), ``spu`` (SPU scheduling, context switches and decrementer intervals),
``bodies`` (vectorized SPE phase bodies per workload), ``driver`` (one process: PPE threads,
mailboxes, signals, phases), ``mpi`` (MPI between processes), ``buffer`` (blocks, reservations,
slots, bytes), ``damage`` (docs/damage.md damage on request), ``manifest`` (run.json).
``cell_otf2.simulate`` is the public entry; ``cell_otf2.truth`` reads the ground truth back.
"""
