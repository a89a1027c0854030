"""Support code of the benchmarks (``bench/*.py``) and the tests, outside the product: accuracy
against the simulator's ground truth (``evaluate.py``), the baseline clock offsets
(``baselines.py``) and the published algorithm's solver and Lamport bumping they use
(``sync_baselines.py``), and the node-fit baselines (``node_baselines.py``). It imports only the
package's public names; the converter never imports it."""
