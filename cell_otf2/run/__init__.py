"""Running a conversion: the public entry (``conversion``), the phases (``driver``), the serial and
MPI teams, the steps that see the whole run, groups of nodes and their spill files, safe output,
the summary, ``check`` and ``inspect``. It decodes, synchronizes and writes nothing itself; it
calls the stages that do."""
