"""Build the optional C helper of the event writer (cell_otf2/_evtwrite.c, issue 18).

Everything else of the package is declared in pyproject.toml. The extension is optional: on a
machine without a C compiler (or without Python's headers) the install goes on without it and
the writer uses its ctypes path (writing about 25x slower). It does not link against OTF2; it gets
the library's functions at run time from the `otf2` bindings.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("cell_otf2._evtwrite", ["cell_otf2/_evtwrite.c"],
                             optional=True),
                   Extension("cell_otf2._evtread", ["cell_otf2/_evtread.c"],
                             optional=True)])
