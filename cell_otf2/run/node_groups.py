"""Which ranks are converted together: whole nodes in node order, merged while their dumps
stay under a byte limit, so a conversion's peak memory follows the largest group rather than
the run. It only plans; decoding, spilling and converting the groups are other modules'."""

from __future__ import annotations

from ..input.manifest import Manifest

#: nodes are grouped while their dumps total at most this many bytes (a larger node is a
#: group of its own); a group's decoded state takes about 2.5 times its dumps' size
GROUP_BYTES = 64 << 20
#: a run whose dumps total at most this many bytes is converted as one group, never spilled
#: (no spill space on disk); a larger run is converted group by group, the others set aside
#: on disk (about 2.5 x the input, in the staging directory): a peak memory of about 4.5 x
#: the largest group's dumps instead of the whole run's, for a little more CPU time
#: (docs/performance.md, "Constants that rest on a measurement")
IN_MEMORY_BYTES = GROUP_BYTES


def node_groups(man: Manifest, dump_bytes: list[int], limit: int = GROUP_BYTES,
                ranks: list[int] | None = None) -> list[list[int]]:
    """Ranks (ascending) of each group: whole nodes in node order, consecutive nodes merged
    while their dumps total at most ``limit`` bytes. Nodes without ranks are in no group.
    ``ranks``: only these ranks (whole nodes: a converter process's share) are grouped."""
    keep = None if ranks is None else set(ranks)
    ranks_of: list[list[int]] = [[] for _ in man.nodes]
    for p in man.processes:
        if keep is None or p.rank in keep:
            ranks_of[man.node_of_rank(p.rank)].append(p.rank)
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for ranks in ranks_of:
        if not ranks:
            continue
        weight = sum(dump_bytes[r] for r in ranks)
        if current and size + weight > limit:
            groups.append(sorted(current))
            current, size = [], 0
        current += ranks
        size += weight
    if current:
        groups.append(sorted(current))
    return groups


