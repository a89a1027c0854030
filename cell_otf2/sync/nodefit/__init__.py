"""The node clock fit: every cluster node's timebase mapped to the reference node's from the
MPI messages between nodes. ``fit.py`` holds the entry points (``fitted_node_maps``,
``fit_nodes``, ``fit_points``) and the maps and results they return; ``points.py`` the message
points, the options and what every step shares; ``estimate.py`` each node's curve centred on
the near-fastest messages of symmetric kinds; ``hard.py`` the constraints that keep every
message ordered and the guaranteed envelope. The method and its measurements are in
docs/accuracy.md (Across nodes); this package re-exports nothing."""
