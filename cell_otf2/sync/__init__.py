"""One global time: happened-before constraints (``order``), their solution (``solver``), the node
clocks of a cluster (``nodefit``), applying the times (``synchronize``) and reading the bounds
(``interval_bounds``). It does not write anything."""
