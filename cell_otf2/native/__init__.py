"""The optional compiled helpers of the per-record loops (the C sources here) and their numpy
twins: the one place that decides which of the two runs. It holds no pipeline logic of its own."""
