"""Reading a run: the CBT 1 byte layout (``format``), the manifest ``run.json`` (``manifest``), one
dump's slots (``reader``) and the run's dumps as the pipeline reads them (``dumps``). It refuses
what the format forbids; it does not decode records into a trace."""
