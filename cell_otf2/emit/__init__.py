"""The mapping of docs/archive.md from decoded, matched and synchronized CBT records to OTF2
definitions and events, one job per module: ``definitions`` (every definition and the id
lookups), ``table`` (the event-table engine: parts, layout by counting, ``EventChunks``),
``kernels`` (its per-event loops, compiled in ``_emitloops.c`` or numpy),
``families`` (one function per CBT record family), ``balance`` (Enter/Leave repair) and
``events`` (``emit``, which runs them in order, and ``EmitStats``). This file imports none of
them; it neither reads, matches, synchronizes nor writes.
"""
