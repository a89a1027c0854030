"""Build the optional C helpers of the per-event loops (issue 18): the event writer
(cell_otf2/native/_evtwrite.c), reading and decoding's per-record loops
(cell_otf2/native/_decodeloops.c), emit's per-event loops (cell_otf2/native/_emitloops.c),
ordering and synchronization's (cell_otf2/native/_syncloops.c), the SPE solver's graph
algorithms (cell_otf2/native/_graphloops.c) and the report's event read-back
(cell_otf2/native/_evtread.c). Everything else of the package is declared
in pyproject.toml. Each extension is optional: on a machine without a C compiler (or without
Python's headers) the install goes on without it and that stage takes its numpy or ctypes path
(same results, slower). None links against OTF2; the writer and the reader get the library's
functions at run time from the `otf2` bindings."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("cell_otf2.native._evtwrite", ["cell_otf2/native/_evtwrite.c"],
                             optional=True),
                   Extension("cell_otf2.native._decodeloops", ["cell_otf2/native/_decodeloops.c"],
                             optional=True),
                   Extension("cell_otf2.native._emitloops", ["cell_otf2/native/_emitloops.c"],
                             optional=True),
                   Extension("cell_otf2.native._evtread", ["cell_otf2/native/_evtread.c"],
                             optional=True),
                   # no fused multiply-add: sums along paths must round as scipy's do
                   Extension("cell_otf2.native._graphloops", ["cell_otf2/native/_graphloops.c"],
                             extra_compile_args=["-ffp-contract=off"], optional=True),
                   # no fused multiply-add: record times must round as numpy's do
                   Extension("cell_otf2.native._syncloops", ["cell_otf2/native/_syncloops.c"],
                             extra_compile_args=["-ffp-contract=off"], optional=True)])
