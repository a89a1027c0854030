"""The CBT 1 run simulator, one job per module: ``run`` (``simulate_run``, the public entry),
``truth`` (the ground truth written beside a run and read back), ``cli`` (``cell2otf2
simulate``), ``clocks`` (node timebases and their true maps), ``records`` (the in-memory record
table every generator appends to), ``spu`` (SPU scheduling, context switches and decrementer
intervals), ``bodies`` (vectorized SPE phase bodies per workload), ``driver`` (one process: PPE
threads, mailboxes, signals, phases), ``mpi`` (MPI between processes), ``buffer`` (blocks,
reservations, slots, bytes), ``damage`` (docs/damage.md damage on request), ``manifest``
(run.json). It re-exports nothing."""
