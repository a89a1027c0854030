"""cell2otf2: convert Cell Broadband Engine trace runs (CBT 1) into synchronized OTF2 archives."""

__version__ = "0.1.0"
