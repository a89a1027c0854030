"""The OTF2 writer, one job per module: ``archive`` (``write_archive``, the only entry the
conversion uses), ``checks`` (the input checks, also used by ``cell2otf2 check``), ``events``
(the events, location by location), ``definitions`` (the global definitions),
``open_archive`` (an archive open for writing), ``capi`` (the OTF2 library's C functions,
the compiled per-event loop, error reports) and ``otf2_internals`` (every use of the
bindings beyond their public functions, also for the report's reader). The subpackage is the
only part of the project that writes through the OTF2 bindings; importing it loads nothing
(import the modules).
"""
