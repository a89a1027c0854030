"""The node fit's estimate: every node's offset curve to the reference, centred on the timely
messages of symmetric kinds (messages of one kind, the same communicator and size, between two
nodes are taken to have the same least latency both ways). First a straight line per node
from each kind's lower support lines of the delays both ways over the whole run (or, for a
node they do not pin, from the middle of its guaranteed envelope; coarse windows if neither
reaches it); then rounds of one least-squares problem over every timely message of every node
pair at once, each node's correction piecewise linear on a grid of windows with a penalty on
its second differences chosen by cross-validation (a line where a line is as good; a line
centred between each pair's fastest messages both ways, not their means), leaving out the
receives recorded as their calls began where a direction has enough its calls waited for.
Over a few
exchanges whose clocks change rate between them, a window per exchange, or the curves
through each exchange's own centres where those leave the node pairs clearly closer to
centre. It keeps no message ordered (``hard.py`` does) and reads no files."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from ...native.graph_loops import weak_components
from .compressed import Compressed, from_triplets, identity, solve_diagonal, spsolve, zeros
from .counted import counted_lines
from .disagree import two_way_centres
from .floors import floor_lift
from .oneway import above_reach, late_one_way, mirrored, pooled_sums, taking_turns
from .points import ORDER_ONLY, FitOptions, by_node, curve_at, curve_slopes
from .scipy_parts import solveh_banded

#: smoothing strengths tried (penalty on second differences, window units), smoothest first
_LAMBDAS = (1e12, 1e10, 1e8, 1e7, 1e6, 1e5, 1e4, 1e3, 1e2, 1e1, 1.0)
#: the joint rounds' weaker strengths, taken only where one of them predicts the held-out
#: windows at least ``_FINER_GAIN`` times better than every strength above, over at least
#: ``_FINER_WINDOWS`` windows (three held out per fold): with one or two timely messages per
#: window a strength of 1 still straightens a wander of minutes, while elsewhere (and over
#: a few windows, where a held-out error means little) the weaker ones mostly fit noise
_FINER = (0.1, 0.01, 0.001)
_FINER_GAIN = 2.5
_FINER_WINDOWS = 9
#: fewer windows than this over the run: the late directions are judged on windows of one
#: exchange as well (five exchanges make three windows of two, too few to tell one)
_FEW_WINDOWS = 4.0
#: fewer windows than this over the run: the joint rounds' grid has a window per exchange
#: (``_grid_width``)
_FEW_GRID = 6
#: ... and the curves miss their timely messages by more than this RMS
_BENT_US = 2.5
#: ... and where some node pair's two directions' fastest differ by more than this (its
#: median over the exchanges where neither came late), curves through the exchanges' own
#: centres if they leave every pair within it and the worst this many times closer
_OFF_CENTRE_US = 10.0
_CLEARLY = 4.0
#: after a first pass that followed a missed drift: the joint rounds again on the grid of
#: the messages timely under its curves when that is this much finer or coarser
_REGRID = 1.5
#: the joint rounds' windows are at most this many times those of each node pair's densest
#: direction (``_grid_width``)
_DENSEST_SHARE = 2.0
#: the weight of a support line with one or two messages on it one way (three or more
#: weigh their count): such a line can be tilted by a pair's late messages, but without it a
#: chain is cut there and the nodes beyond start from the envelope's lines: an 8-node chain
#: with MPI every 10 s over 400 s, whose 20 us of wander left one pair's line two timely
#: messages one way, started 3-5 ms off and stayed 1.25 ms off (1.6 us with the line); a
#: 6-node chain of 3 minutes with one message on a line, 287 us (6.8 us with it). A line
#: with one message on it one way counts only for a pair with ``_ONE_ON_LINE_MESSAGES``
#: messages each way or more (in runs of a few exchanges it pins nothing: 1.6 -> 65 us), or
#: with three or more on it the other way (a 2-node chain of ten exchanges, one timely
#: message back: 316 us off without it, 0.83 us with it)
_WEAK_LINE = 0.5
_ONE_ON_LINE_MESSAGES = 24
#: the missed-drift pass's late windows (``_late_windows``): a direction whose fastest rose
#: above its least by under this share of the other direction's rise is not the late one;
#: the node family's rate-step chains (4-8 nodes, links late one way in most exchanges)
#: went from 23-455 us RMS to 1.5-28 us; a share of 0.25 let slightly late messages through
#: on a 6-node chain with MPI every 0.5 s (0.67 -> 32 us), 0.1 left it at 1.0 us
_SPARED_RISE = 0.1
#: ... where the node pair has at least this many windows whose two fastest sum to within
#: the margin of the least (a 2-node chain of 12 exchanges with one such window: 1.4 -> 6.7
#: ms without it)
_SPARING_WINDOWS = 3
#: ... or where the direction is steady: this share of its windows, and this many at least,
#: within what the rate limit lets its other windows allow (a 12-node ring of 5 minutes,
#: MPI every 7 s, rates in three pieces of up to 80 ppm: links timely one way in most
#: exchanges, the other in two to ten, had both directions set aside in all but two
#: windows)
_STEADY_SHARE = 0.75
_STEADY_WINDOWS = 6
#: long runs whose timely messages are sparse: where that grid's windows are
#: ``_SPARSE_WIDTH_S`` long or more and the directions carry ``_SPARSE_MESSAGES`` messages
#: or more over the run, windows of ``_SPARSE_MIN_S`` instead (knots that often): each
#: timely row pins the offset given its kind's latency, and the cross-validated smoothing
#: decides how much of that detail a curve keeps. A busy 3-node chain (MPI every 10 s, every
#: exchange received late one way or the other) had 6-8 windows of 41-58 s for a 2-minute
#: wander. Which messages are timely is still judged on windows of about one exchange
#: (``_SPARSE_SPACINGS`` times the messages' usual spacing, ``_SPARSE_MIN_S`` at least):
#: judged on windows of one message or none, late messages pass for timely (8-node chains
#: with MPI every 10 s over 5-10 minutes: 0.5-5 ms off on windows of 6-10 s). Before, the
#: grid held about one timely message of either direction, at most 48 windows: 25 s long
#: over 20 minutes, where such chains came out 14 and 19 us off (now 1.7 and 2.2)
_SPARSE_WIDTH_S = 15.0
_SPARSE_MESSAGES = 24
_SPARSE_SPACINGS = 1.25
_SPARSE_MIN_S = 6.25
#: after the joint rounds' first round, a direction's least (what its late windows are told
#: against) is the lowest of its ``_LEAST_WINDOWS`` lowest window fastest with half its
#: windows within ``late_window_us`` above it, not its single fastest: one window where
#: the curve dipped (a 12-node ring whose rates stepped by up to 80 ppm, MPI every 7 s:
#: one window 60 us below the others) made every other window of a timely direction late,
#: the direction's messages left the fit, and six nodes beyond that link stayed 43 us off
#: (31 us RMS over the ring -> 3.9; with 18 us of wander 12.4 -> 4.8)
_LEAST_WINDOWS = 3
#: ... and at least this many windows so (an 8-node chain of 0.3 s whose receives came
#: 18-20 us late in two of four windows one way: 0.75 -> 4.9 us RMS without it)
_LEAST_CLUSTER = 8
#: ... but a window whose two fastest sum to within ``late_window_us`` of its kind and node
#: pair's least sum stays timely, where the pair has ``_SUM_GOOD`` such windows or more and
#: the test against each direction's least sets aside ``_SUM_SHARE`` of them or more: the
#: curves then miss the pair by more than the margin, which no lateness raises a sum by
#: (a 16-node chain whose rates stepped by up to 80 ppm, MPI every 10 s: after the first
#: round one link was 66 us off, the next round kept 4 of the 82 timely messages the first
#: had used there, and the link drifted 0.3-0.4 ms off, now 50-65 us; a 6-node chain over
#: 10 exchanges 589 -> 175 us RMS)
_SUM_GOOD = 8
_SUM_SHARE = 0.5
#: ... and a window of a direction steady under the curves stays timely (``_within_reach``
#: with the curves' error drifting by up to ``_LOCAL_PPM`` ppm: three quarters of its
#: windows, six at least, within the margin of what its other windows allow), where the
#: test against the least sets aside ``_LOCAL_SHARE`` of its steady windows or more: the
#: curves' error still drifts after the first round (a 12-node ring of 10 minutes whose
#: rates stepped by up to 80 ppm, MPI every 7 s: six nodes in a row off together by a
#: ramp of 0.6 ms over the run, their two links timely one way in 77 and 81 of 86
#: exchanges, all but one or two of them set aside; 173 -> 54 us RMS). Without the share,
#: the steady windows set aside were the slightly late ones where the test sets aside few
#: (a 16-node run with MPI every 0.2 s, receives 14 us late or more in most exchanges:
#: 0.23 -> 0.37 us RMS); 5-10 ppm made two other rate-step rings worse (8.4 -> 9.2 us)
_LOCAL_PPM = 2.0
_LOCAL_SHARE = 0.5
#: nodes beyond which the joint rounds' normal equations are factored in a minimum degree
#: order: in the unknowns' own order the factor is a band as wide as a knot's nodes plus
#: the kinds' columns, and grows with the square of the nodes (a 64-node ring, 4,852
#: unknowns: 1.7 M nonzeros in the factors against 0.57 M, 0.23-0.33 s a solve against
#: 0.02-0.03, 10 of the conversion's 17 s). Up to 16 nodes the natural order, which every
#: run of the node family was measured with: the two orders' solutions differ by rounding,
#: up to a tick where a weak penalty leaves the system near singular
_NATURAL_ORDER_NODES = 16


@dataclass
class Curves:
    """Per node: knots (node timebase) and the offset beyond ``x + c`` there (None: the
    reference or a node the estimate does not reach), the model chosen and its expected RMS
    error in ticks under the symmetric-latency assumption (NaN: unknown)."""

    knots: list[np.ndarray | None]
    values: list[np.ndarray | None]
    model: list[str]
    error: np.ndarray
    windows: int = 0
    window_ticks: float = 0.0
    samples: int = 0  # symmetric (pair, kind, window) samples of the last round
    residual: float = 0.0  # the last round's RMS residual of its timely messages, ticks
    #: the first lines missed a drift, and the curves were followed from a first pass: the
    #: rounds' residuals may then understate the error (``disagree.py``)
    followed_drift: bool = False


#: a direction with this many receives its calls waited for leaves those recorded as their
#: calls began out of the rounds: with fewer (a busy 3-node chain: 3 of 30 exchanges one
#: way), they are what the rounds tell its lateness by (19.5 us RMS instead of 2.2 without)
_WAITED = 16
#: ... and at most this share of its receives waited for: where more are, its windows'
#: fastest are mostly those, and leaving the others out changes only how many messages the
#: grid is chosen by (a busy 3-node chain, 18 of 30 waited for: 1.2 -> 13.6 us RMS)
_WAITED_SHARE = 0.05


def offsets_at(curves_knots: list[np.ndarray | None], curves_values: list[np.ndarray | None],
               node: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each entry's curve value (0 where the node has no curve)."""
    out = np.zeros(x.size)
    for n, sel in by_node(node):
        k = curves_knots[n] if 0 <= n < len(curves_knots) else None
        v = curves_values[n] if k is not None else None
        if k is not None and v is not None:
            out[sel] = curve_at(k, v, x[sel])
    return out


def estimate(pts: np.ndarray, n_nodes: int, ref: int, c: np.ndarray, hz: float,
             o: FitOptions, prior: list[tuple[np.ndarray, np.ndarray] | None] | None = None
             ) -> Curves:
    """Every node's curve from the symmetric kinds among ``pts`` (POINT_DTYPE; ``c`` the rough
    offsets: reference ~ timebase + c; ``hz`` ticks per second). ``prior``: per node a first
    curve (knots, offsets beyond ``x + c``) for the nodes the support lines do not pin."""
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    fwd = a == lo
    u = pts["ta"] + c[a]
    kind = pts["kind"]
    kinds, kid = np.unique(kind, return_inverse=True)
    group = (lo * n_nodes + hi) * kinds.size + kid.ravel()
    sym = kind != ORDER_ONLY
    # groups with messages both ways
    d_key = group * 2 + (~fwd)
    present = np.unique(d_key[sym])
    both = np.intersect1d(present[present % 2 == 0] // 2, present[present % 2 == 1] // 2)
    keep = sym & np.isin(group, both)
    curves = Curves([None] * n_nodes, [None] * n_nodes, [""] * n_nodes,
                    np.full(n_nodes, np.nan))
    if not keep.any():
        return curves
    a, b, lo, hi, fwd, u, group = (a[keep], b[keep], lo[keep], hi[keep], fwd[keep], u[keep],
                                   group[keep])
    ta, tb = pts["ta"][keep], pts["tb"][keep]
    # a node pair late one way in every exchange: its late direction's messages give way to
    # the timely direction's, mirrored (``oneway.py``), so that the pair is centred on its
    # kind's usual least latency, not between a timely and a late direction
    d_kept = group * 2 + (~fwd)
    run = max(float(np.ptp(u)), 1.0)
    delay = (tb + c[b]) - (ta + c[a])
    margin, rate = max(o.late_window_us, o.timely_us) * 1e-6 * hz, 2.0 * o.max_ppm * 1e-6
    w_ow = _window_width(d_kept, u, run, o)
    # (kinds no pair gives a sum alone: each pair's least, pooled over the kind's pairs)
    pooled = pooled_sums(delay, d_kept, u, kinds.size, margin, rate, set())
    late, usual, on_time = late_one_way(delay, d_kept, u, w_ow, kinds.size, margin, rate,
                                        pooled=pooled)
    if run / w_ow < _FEW_WINDOWS:  # few windows: those of one exchange tell more directions
        late_1, usual_1, on_time_1 = late_one_way(
            delay, d_kept, u, _window_width(d_kept, u, run, replace(o, window_messages=1)),
            kinds.size, margin, rate, pooled=pooled)
        more = ~np.isin(late_1, late)
        late, usual = np.r_[late, late_1[more]], np.r_[usual, usual_1[more]]
        on_time &= on_time_1
    # the start lines also mirror directions timely in at most a quarter of their windows:
    # a few timely windows of a wandering clock pin no line
    late_l, usual_l, on_time_l = late_one_way(delay, d_kept, u, w_ow, kinds.size, margin,
                                              rate, timely_share=0.25, pooled=pooled)
    more = ~np.isin(late, late_l)
    late_l, usual_l = np.r_[late_l, late[more]], np.r_[usual_l, usual[more]]
    on_time_l &= on_time
    real = (a, b, ta, tb, group)
    # pairs of such a kind whose directions take turns at being late, never timely together:
    # their timely messages mirrored with the kind's usual sum too
    turns = taking_turns(delay, d_kept, u, kinds.size, margin, rate, late, usual, pooled)
    # a receive recorded as its call began had come before the call, and its delay is
    # lateness, if only a few microseconds (windows of dense exchanges then take it for their
    # fastest): the rounds leave such receives out of a direction that has ``_WAITED``
    # receives the call waited for, and mirror none (a late direction's all give way)
    at = pts["at_entry"][keep]
    waited = np.bincount(d_kept[~at], minlength=int(d_kept.max()) + 1)
    sent = np.bincount(d_kept, minlength=waited.size)
    looked = at & (waited[d_kept] >= _WAITED) & (waited[d_kept] <= _WAITED_SHARE * sent[d_kept])
    drop = looked & ~np.isin(d_kept, late)
    if looked.any():
        turns = (turns[0] | drop, turns[1], turns[2])
        on_time = on_time & ~looked
    if late.size or turns[1].size or looked.any():
        a, b, ta, tb, group = _with_mirrored(real, d_kept, late, usual, on_time, turns)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        fwd = a == lo
        u = ta + c[a]
    lines_of: tuple[np.ndarray, ...] = (a, b, ta, tb, group)
    if late_l.size > late.size:
        lines_of = _with_mirrored(real, d_kept, late_l, usual_l, on_time_l, turns)
    u0, u1 = float(u.min()), float(u.max())
    span = max(u1 - u0, 1.0)
    knots: list[np.ndarray | None] = [None] * n_nodes
    values: list[np.ndarray | None] = [None] * n_nodes
    reached = np.zeros(n_nodes, dtype=bool)
    late_ticks = o.outlier_us * 1e-6 * hz
    # first a straight line per node from the lower support lines of every kind's delays in
    # each direction over the whole run: late receives lie above them, and a drift that a
    # window's fastest messages would turn into a bias is taken out before any window
    a_l, b_l, ta_l, tb_l, group_l = lines_of
    fwd_l = a_l < b_l
    u_l = ta_l + c[a_l]
    r_l = (tb_l + c[b_l]) - (ta_l + c[a_l])
    tbar = 0.5 * (u0 + u1)
    gk, d0, beta, support, most = _support_lines(group_l, fwd_l, u_l - tbar, r_l, late_ticks)
    # a pair whose directions take turns at being late tilts its support lines until late
    # messages touch them, and pins nothing: a line through the most messages instead
    # (its messages off that line are set aside in the first joint round, whose test of
    # late windows is loose)
    weak = np.flatnonzero(support < 3)
    off_line = None
    if weak.size:
        d0_w, beta_w, support_w, off_line = counted_lines(
            group_l, fwd_l, u_l - tbar, r_l, late_ticks, rate, gk[weak])
        if group_l is not group:  # the messages set aside: of those the rounds use
            off_line = counted_lines(group, fwd, u - tbar, (tb + c[b]) - (ta + c[a]),
                                     late_ticks, rate, gk[weak])[3]
        now = support_w >= 3
        d0[weak[now]], beta[weak[now]], support[weak[now]] = (d0_w[now], beta_w[now],
                                                              support_w[now])
        most[weak[now]] = support_w[now]
    # a line is pinned by three messages on it each way at least (two make any line); one
    # with two on it one way still links its pair, lightly (``_WEAK_LINE``), and so does one
    # with one where the pair has ``_ONE_ON_LINE_MESSAGES`` messages each way or more, or
    # where the other way has three or more on it (their line sets the slope, the one
    # message the level)
    each = np.bincount(group_l * 2 + (~fwd_l), minlength=2 * (int(group_l.max()) + 1))
    many = np.minimum(each[0::2], each[1::2])[gk] >= _ONE_ON_LINE_MESSAGES
    one = (support >= 1) & (many | (most >= 3))
    pinned = np.where(support >= 3, support,
                      np.where((support >= 2) | one, _WEAK_LINE, 0.0))
    if gk.size:
        ends = np.array([u0, u1])
        gw = np.repeat([0, 1], gk.size)  # window 0: the run's start, 1: its end
        delta = np.r_[d0 + beta * (u0 - tbar), d0 + beta * (u1 - tbar)]
        pair = np.r_[gk, gk] // kinds.size
        e, linked = _window_offsets(gw, pair // n_nodes, pair % n_nodes, delta, 2, n_nodes,
                                    ref, np.r_[pinned, pinned])
        for n in range(n_nodes):
            if n != ref and linked[:, n].all():
                knots[n], values[n] = ends - c[n], -e[:, n]
                curves.model[n] = "line"
    for n in range(n_nodes):
        first = prior[n] if prior is not None else None
        if knots[n] is None and first is not None and n != ref:
            knots[n], values[n] = first
            curves.model[n] = "line"
    # with every node on a line, a window's fastest message is told from a late one from
    # the first window on; else only once the rounds have reached the final windows
    lines = all(knots[n] is not None for n in np.unique(np.r_[lo, hi]).tolist() if n != ref)
    if not lines:
        # coarse to fine: few long windows first (their fastest messages are never all late,
        # and the rate they give lets the finer windows' fastest messages be told from late
        # ones)
        n_target = max(1, int(np.ceil(span / _window_width(group * 2 + (~fwd), u, span, o))))
        schedule = [k for k in (2 ** np.arange(0, 24)).tolist() if k < n_target] + [n_target]
        for n_win in schedule:
            _window_round(n_win, span, u0, u, group, fwd, lo, hi, ta, tb, a, b, c, knots,
                          values, reached, curves, n_nodes, ref, o, late_ticks)
    for n in range(n_nodes):
        reached[n] |= knots[n] is not None and n != ref
    if all(reached[n] for n in np.unique(np.r_[lo, hi]).tolist() if n != ref):
        args = (span, u0, u, group, fwd, lo, hi, ta, tb, a, b, c, knots, values, curves,
                n_nodes, ref, o, late_ticks, hz, off_line)
        # (the directions mirrored take their floors from their kinds' usual sums)
        rounds = partial(_joint_rounds, *args, n_kinds=int(kinds.size), mirrored_keys=late)
        d_key = group * 2 + (~fwd)
        # Where the lines seem to miss a drift (a rate that changed: a line is centred
        # between the hulls of the curve; ``_missed_drift``), a first pass on a grid of
        # every message, its first round's late windows judged on both directions at once.
        # Where its curves leave the lines by more than ten times ``outlier_us``, the rounds
        # go on from them (on the grid of the messages timely under them if that is much
        # finer or coarser). Otherwise the rounds start from the lines, on the grid of the
        # messages timely under them (late receives do not resolve a curve).
        msgs = (ta, tb, a, b, c)
        r = _residuals(ta, tb, a, b, c, knots, values)
        fine, fine_judge = _grid_width(span, u, d_key, None, o, late_ticks, kinds.size, hz)
        followed = False
        if _missed_drift(r, u, d_key, kinds.size, u0, fine, 4.0 * late_ticks):
            start = _snapshot(knots, values, curves)
            used = rounds(width=fine, judge=fine_judge)
            # followed where the curves moved, but not to where messages arrive before they
            # are sent (a pass that took late messages for timely ones can move by
            # milliseconds: no clock does that to every message of a direction)
            floor_r = _impossible_below(r, late_ticks)
            possible = _undo_impossible(start, knots, values, curves, msgs, floor_r, ref)[0]
            r_pass = _residuals(ta, tb, a, b, c, knots, values)
            if possible and _moved(start[0], start[1], knots, values, 10.0 * late_ticks):
                r = r_pass
                width, judge = _grid_width(span, u, d_key, r, o, late_ticks, kinds.size, hz)
                if not used / _REGRID <= width <= used * _REGRID:
                    passed = _snapshot(knots, values, curves)
                    rounds(width=width, judge=judge)
                    _undo_impossible(passed, knots, values, curves, msgs, floor_r, ref)
                followed = curves.followed_drift = True
            else:
                knots[:], values[:], curves.model[:] = start[0], start[1], start[2]
                curves.error[:] = start[3]
        if not followed:
            width, judge = _grid_width(span, u, d_key, r, o, late_ticks, kinds.size, hz)
            rounds(missed_drift=False, width=width, judge=judge)
        # few windows: where the timely messages leave the curves by more than their jitter
        # (clocks that changed rate between exchanges), the rounds again on a window per
        # exchange; where a node pair is still far off centre, the curves through the
        # exchanges' own centres if they leave every pair near it (a chain whose lines
        # missed the bends, and whose rounds judged timely messages late under them)
        if curves.windows < _FEW_GRID:
            if curves.residual > _BENT_US * 1e-6 * hz:
                r = _residuals(ta, tb, a, b, c, knots, values)
                one, one_judge = _grid_width(span, u, d_key, r, replace(o, window_messages=1),
                                             late_ticks, kinds.size, hz)
                if one * _REGRID <= curves.window_ticks:
                    before = _snapshot(knots, values, curves)
                    rounds(missed_drift=False, width=one, judge=one_judge)
                    _undo_impossible(before, knots, values, curves, msgs,
                                     _impossible_below(r, late_ticks), ref)
            ex, centres = _exchanges(u, d_key)
            raw = (tb + c[b]) - (ta + c[a])
            off = _asymmetry(ex, d_key, raw, msgs, knots, values, margin)
            if off > _OFF_CENTRE_US * 1e-6 * hz:
                ex_knots, ex_values = _exchange_curves(ex, centres, d_key, raw, lo, hi, c,
                                                       knots, ref, margin)
                ex_off = _asymmetry(ex, d_key, raw, msgs, ex_knots, ex_values, margin)
                # not where a curve runs beyond the rate limit: a pair late one way in every
                # exchange, which nothing named, put it off centre by half its lateness
                steep = any(v is not None and k.size > 1
                            and np.max(curve_slopes(k, v)) > o.max_ppm * 1e-6
                            for k, v in zip(ex_knots, ex_values, strict=True))
                near = ex_off <= _OFF_CENTRE_US * 1e-6 * hz and ex_off * _CLEARLY < off
                if near and not steep:
                    for n in range(n_nodes):
                        if ex_values[n] is not None:
                            knots[n], values[n] = ex_knots[n], ex_values[n]
                            curves.model[n] = "exchanges"
                            # through each exchange's centres: no residual tells the error
                            # between them (the bound does)
                            curves.error[n] = np.nan
    for n in range(n_nodes):
        if not reached[n]:
            knots[n] = values[n] = None
    curves.knots, curves.values = knots, values
    return curves


def _exchanges(u: np.ndarray, d_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exchanges: per message the exchange it was sent in (messages sent apart by less
    than half the usual interval of a direction's messages are one exchange) and each
    exchange's median time."""
    order = np.argsort(u, kind="stable")
    period = _periods(d_key, u)[1]
    gap = 0.5 * float(np.median(period)) if period.size else np.inf
    t = u[order]
    new = np.r_[True, np.diff(t) > gap] if t.size else np.zeros(0, dtype=bool)
    ex = np.empty(u.size, np.int64)
    ex[order] = np.cumsum(new) - 1
    start = np.flatnonzero(new)
    end = np.r_[start[1:], t.size]
    return ex, 0.5 * (t[(start + end - 1) // 2] + t[(start + end) // 2])


def _fastest_pairs(ex: np.ndarray, d_key: np.ndarray, r: np.ndarray, raw: np.ndarray,
                   margin: float) -> tuple[np.ndarray, ...]:
    """Per (kind and node pair, exchange) with messages both ways whose two fastest ``raw``
    delays sum to within ``margin`` of the least such sum of the kind and node pair (twice
    the least latency, whatever the clocks: no message there came late): (the exchange,
    the forward and backward fastest delays ``r`` there, a forward message of it, the
    pair's group)."""
    n_ex = int(ex.max()) + 1
    key = ((d_key // 2) * n_ex + ex) * 2 + (d_key % 2)
    order = np.lexsort((raw, key))
    ks = key[order]
    first = np.r_[True, ks[1:] != ks[:-1]]
    ks, at = ks[first], order[first]
    pair = np.flatnonzero((ks[:-1] % 2 == 0) & (ks[1:] == ks[:-1] + 1))
    fa, ba = at[pair], at[pair + 1]
    total = raw[fa] + raw[ba]
    g = d_key[fa] // 2
    least = np.full(int(g.max()) + 1 if g.size else 0, np.inf)
    np.minimum.at(least, g, total)
    ok = total <= least[g] + margin
    fa, ba, g = fa[ok], ba[ok], g[ok]
    return (ks[pair][ok] // 2) % n_ex, r[fa], r[ba], fa, g


def _asymmetry(ex: np.ndarray, d_key: np.ndarray, raw: np.ndarray,
               msgs: tuple[np.ndarray, ...], knots: list, values: list,
               margin: float) -> float:
    """How far the curves leave a node pair off centre: per (kind and) node pair, the
    median over its exchanges with timely messages both ways (``_fastest_pairs``) of the
    difference of the two directions' fastest delays under them (twice the curves' error
    there, where the two least latencies are alike); the largest over the pairs. ``ex``:
    each message's exchange (``_exchanges``), ``raw`` its delay under no curves."""
    ta, tb, a, b, c = msgs
    _, fwd, bwd, _, g = _fastest_pairs(ex, d_key, _residuals(ta, tb, a, b, c, knots, values),
                                       raw, margin)
    if not g.size:
        return np.inf
    order = np.argsort(g, kind="stable")
    gs, d = g[order], np.abs(fwd - bwd)[order]
    start = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
    return float(max(np.median(part) for part in np.split(d, start[1:])))


def _exchange_curves(ex: np.ndarray, centres: np.ndarray, d_key: np.ndarray,
                     raw: np.ndarray, lo: np.ndarray, hi: np.ndarray, c: np.ndarray,
                     knots: list, ref: int, margin: float) -> tuple[list, list]:
    """Curves through the exchanges: per exchange, each node pair centred between its
    fastest messages both ways (of each kind; where neither came late, ``_fastest_pairs``),
    least squares over the pairs, each node's curve piecewise linear through the exchanges
    that link it to the reference (a node linked in fewer than two keeps its curve of
    ``knots``: None then). ``ex``, ``centres``: ``_exchanges``; ``raw``: the delays under no
    curves."""
    n_nodes = len(knots)
    w, fwd, bwd, at, _ = _fastest_pairs(ex, d_key, raw, raw, margin)
    e, linked = _window_offsets(w, lo[at], hi[at], 0.5 * (fwd - bwd), centres.size, n_nodes,
                                ref)
    out_k: list = [None] * n_nodes
    out_v: list = [None] * n_nodes
    for n in range(n_nodes):
        if n == ref or knots[n] is None or np.count_nonzero(linked[:, n]) < 2:
            out_k[n], out_v[n] = knots[n], None
            continue
        on = linked[:, n]
        out_k[n], out_v[n] = centres[on] - c[n], -e[on, n]
    return out_k, out_v


def _snapshot(knots: list, values: list, curves: Curves) -> tuple:
    """Every node's knots, values, model and error as they are now, for ``_undo_impossible``
    and the estimate to go back to."""
    return list(knots), list(values), list(curves.model), curves.error.copy()


def _impossible_below(r: np.ndarray, late_ticks: float) -> float:
    """The residual below which a pass's curves put a message impossibly early, for
    ``_undo_impossible``: four lateness margins below the least of ``r`` (the residuals
    before the pass), or below zero if that is less."""
    return min(float(r.min()), 0.0) - 4.0 * late_ticks


def _undo_impossible(start: tuple, knots: list, values: list, curves: Curves,
                     msgs: tuple[np.ndarray, ...], floor_r: float, ref: int
                     ) -> tuple[bool, int]:
    """After the missed-drift pass: where its curves make messages arrive before they are
    sent by more than ``floor_r`` allows, the nodes whose own curve does it go back to their
    start (``start``: knots, values, models, errors before the pass), one at a time, each
    the node whose return leaves the fewest such messages, until none is left; the other
    nodes keep the pass's curves (a chain whose end node the pass misled: its other nodes'
    curves followed their drift). (Whether that leaves some node from the pass and no such
    message, how many nodes went back.)"""
    ta, tb, a, b, c = msgs

    def bad_count() -> int:
        return int((_residuals(ta, tb, a, b, c, knots, values) < floor_r).sum())

    def put(n: int, state: tuple) -> None:
        knots[n], values[n], curves.model[n] = state[0][n], state[1][n], state[2][n]
        curves.error[n] = state[3][n]

    moved = [n for n in range(len(knots)) if n != ref and knots[n] is not start[0][n]]
    left, undone = bad_count(), 0
    while left and moved:
        spoiled = _residuals(ta, tb, a, b, c, knots, values) < floor_r
        suspects = [n for n in moved if spoiled[(a == n) | (b == n)].any()]
        if not suspects:
            break
        now = _snapshot(knots, values, curves)
        trials = []
        for n in suspects:
            put(n, start)
            trials.append((bad_count(), n))
            put(n, now)
        left, worst = min(trials)
        put(worst, start)
        moved.remove(worst)
        undone += 1
    return left == 0 and bool(moved), undone


def _with_mirrored(real: tuple[np.ndarray, ...], d_key: np.ndarray, late: np.ndarray,
                   usual: np.ndarray, on_time: np.ndarray,
                   turns: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """The messages (a, b, ta, tb, group) with those of the directions ``late`` replaced by
    their timely directions', mirrored (``oneway.mirrored``), and those of pairs taking
    turns (``oneway.taking_turns``: dropped, mirrored and their sums) likewise."""
    a, b, ta, tb, group = real
    stay, which, sums = mirrored(d_key, late, usual, on_time)
    stay = stay & ~turns[0]
    which, sums = np.r_[which, turns[1]], np.r_[sums, turns[2]]
    return (np.r_[a[stay], b[which]], np.r_[b[stay], a[which]], np.r_[ta[stay], tb[which]],
            np.r_[tb[stay], ta[which] + sums], np.r_[group[stay], group[which]])


def _window_round(n_win: int, span: float, u0: float, u: np.ndarray, group: np.ndarray,
                  fwd: np.ndarray, lo: np.ndarray, hi: np.ndarray, ta: np.ndarray,
                  tb: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                  knots: list, values: list, reached: np.ndarray, curves: Curves,
                  n_nodes: int, ref: int, o: FitOptions, late_ticks: float) -> None:
    """One coarse round: per window the fastest message each way of every kind centres the
    node pair; the curves gain the smoothed correction (for nodes no support line pins)."""
    width = span / n_win
    centers = u0 + (np.arange(n_win) + 0.5) * width
    win = np.clip(((u - u0) // width).astype(np.int64), 0, n_win - 1)
    key = (group * n_win + win) * 2 + (~fwd)
    r = (tb + c[b] + offsets_at(knots, values, b, tb)) - (
        ta + c[a] + offsets_at(knots, values, a, ta))
    order = np.lexsort((r, key))
    ks, rs = key[order], r[order]
    first = np.r_[True, ks[1:] != ks[:-1]]
    ks, rs, at = ks[first], rs[first], order[first]  # per (group, window, direction)
    pair = np.flatnonzero((ks[:-1] % 2 == 0) & (ks[1:] == ks[:-1] + 1))
    gw = ks[pair] // 2
    delta = 0.5 * (rs[pair] - rs[pair + 1])  # error of (hi - lo) under the curves
    e, linked = _window_offsets(gw % n_win, lo[at[pair]], hi[at[pair]], delta, n_win,
                                n_nodes, ref)
    curves.samples = int(gw.size)
    for n in range(n_nodes):
        if n == ref or not linked[:, n].any():
            continue
        reached[n] = True
        x = centers - c[n]
        # the correction is smoothed, not the curve: a coarse round's constant keeps
        # the rate the rounds before found
        step, model, curves.error[n] = smooth(-np.where(linked[:, n], e[:, n], 0.0),
                                              linked[:, n].astype(float), o, late_ticks)
        # the curve so far plus the step (piecewise linear on this round's windows)
        kn = x if knots[n] is None else np.union1d(knots[n], x)
        base = (curve_at(knots[n], values[n], kn) if knots[n] is not None
                else np.zeros(kn.size))
        knots[n], values[n] = kn, base + curve_at(x, step, kn)
        if curves.model[n] != "smooth":
            curves.model[n] = "line" if model in ("constant", "line") else model


def _joint_rounds(span: float, u0: float, u: np.ndarray, group: np.ndarray, fwd: np.ndarray,
                  lo: np.ndarray, hi: np.ndarray, ta: np.ndarray, tb: np.ndarray,
                  a: np.ndarray, b: np.ndarray, c: np.ndarray, knots: list, values: list,
                  curves: Curves, n_nodes: int, ref: int, o: FitOptions, late_ticks: float,
                  hz: float, set_aside: np.ndarray | None, width: float,
                  missed_drift: bool = True, judge: float | None = None,
                  n_kinds: int = 0, mirrored_keys: np.ndarray | None = None) -> float:
    """The final rounds, on a grid of windows ``width`` long, late and timely messages told
    apart on windows ``judge`` long (default: ``width``; ``missed_drift``: the curves
    may still miss a drift by far more than any lateness; the first round's late windows are
    then judged on the sum of both directions, ``_late_windows``; ``set_aside``: messages
    late in any case in the first round): every timely message (within
    ``timely_us`` of its direction's fastest in its window, and the window not one whose
    messages that way all came late:
    its fastest within ``late_window_us`` of the direction's least over the run, four
    times ``outlier_us`` of its fastest in the first round; after it, a window also stays
    where the pair's two-way sums or its direction's steadiness show that the curves
    still miss it, ``_late_after_first``)
    is an equation ``delay = least latency of its kind and node pair +- (E_hi - E_lo)(t)``,
    E each node's correction, piecewise linear on a grid of windows with a penalty on its
    second differences; least squares over all of them at once (nodes reached through
    others included, no need for both directions in one window). The penalty is chosen by
    cross-validation over interleaved windows, the straightest within ``simpler_within`` of
    the best; a robust refit drops messages far off. Where the choice is a line, each kind
    and node pair is then re-centred between its two directions' least residuals
    (``floor_messages``; ``floors.floor_lift``: a direction of ``mirrored_keys``, its pair's
    other direction mirrored, from its kind's usual two-way sum, ``n_kinds`` kinds); where
    it is a smooth curve, only the pairs with a mirrored direction are."""
    d_key = group * 2 + (~fwd)
    n_k = int(round(span / width))
    nodes = [n for n in range(n_nodes) if n != ref and knots[n] is not None]
    col_of = np.full(n_nodes, -1)
    col_of[nodes] = np.arange(len(nodes))
    groups, g_inv = np.unique(group, return_inverse=True)
    g_inv = g_inv.ravel()
    n_e = len(nodes) * n_k
    n_x = n_e + int(g_inv.max()) + 1
    pos = np.clip((u - u0) / width - 0.5, 0.0, max(n_k - 1.0, 0.0))
    j0 = np.minimum(pos.astype(np.int64), max(n_k - 2, 0))
    frac = pos - j0 if n_k > 1 else np.zeros(u.size)
    sign = np.where(fwd, 1.0, -1.0)
    pen = _penalty(len(nodes), n_k, n_x)
    fill = n_nodes > _NATURAL_ORDER_NODES
    win = np.clip(((u - u0) // width).astype(np.int64), 0, n_k - 1)
    timely_ticks = o.timely_us * 1e-6 * hz
    late_window_ticks = max(late_window_us(o, span / hz) * 1e-6 * hz, timely_ticks)
    n_j = max(1, int(round(span / (judge or width))))  # the windows late ones are told on
    win_j = np.clip(((u - u0) // (span / n_j)).astype(np.int64), 0, n_j - 1)
    key = d_key * n_j + win_j
    strength: float | None = None
    for rnd in range(max(1, o.rounds)):
        r = _residuals(ta, tb, a, b, c, knots, values)
        floor = np.full(int(key.max()) + 1, np.inf)
        np.minimum.at(floor, key, r)
        gmin = np.full(int(d_key.max()) + 1, np.inf)
        np.minimum.at(gmin, d_key, r)
        # the first round's curves may still miss wander by tens of microseconds: a loose
        # test of late windows there, a tighter one once the curves follow the clocks
        if rnd == 0 and missed_drift:  # curves that may miss a drift by far more than any
            late = _late_windows(floor, key, d_key, n_j, 4.0 * late_ticks,  # lateness
                                 2.0 * o.max_ppm * 1e-6 * span / n_j)
        elif rnd == 0:
            late = floor[key] > gmin[d_key] + 4.0 * late_ticks
        else:
            late = _late_after_first(floor, key, d_key, n_j, late_window_ticks, gmin,
                                     _LOCAL_PPM * 1e-6 * span / n_j)
        if rnd == 0 and set_aside is not None:
            late = late | set_aside
        use = (r <= floor[key] + timely_ticks) & ~late
        rows = np.flatnonzero(use)
        if rows.size == 0:
            return np.inf
        mat = _design(rows, lo, hi, sign, j0, frac, g_inv, col_of, len(nodes), n_k, n_x)
        rhs = r[rows]
        if strength is None:  # chosen once: later rounds only refine the centring
            strength = _choose(mat, rhs, pen, win[rows], o, fill_reducing=fill)
        x = _solve(mat, rhs, pen, strength, fill)
        res = mat @ x - rhs
        scale = 1.4826 * float(np.median(np.abs(res)))
        keep = np.abs(res) <= max(5.0 * scale, 1.0)
        kept = mat
        if not keep.all() and keep.sum() > n_x:
            kept = mat.rows(keep)
            x = _solve(kept, rhs[keep], pen, strength, fill)
            res = kept @ x - rhs[keep]
        else:
            keep = np.ones(rows.size, dtype=bool)  # the fit above is over every row
        # a line: centred between each pair's fastest messages both ways, not their means
        # (a smooth curve: only the pairs with a mirrored direction)
        line = strength >= _LAMBDAS[0]
        if (o.floor_messages > 0 and np.isfinite(x).all()
                and (line or (mirrored_keys is not None and mirrored_keys.size > 0))):
            latency = np.full(int(groups[-1]) + 1, np.nan)  # per group, its column's
            latency[groups] = x[n_e:]
            lift = floor_lift(rhs[keep] - kept @ x, d_key[rows][keep],
                              int(d_key.max()) + 1, o.floor_messages,
                              o.floor_near_us * 1e-6 * hz, latency, n_kinds, mirrored_keys,
                              mirrored_only=not line)
            if lift.any():
                x = _solve(kept, rhs[keep] + lift, pen, strength, fill)
                res = kept @ x - (rhs[keep] + lift)
        if not np.isfinite(x).all():
            return width  # singular: the curves stay as the rounds before left them
        e = x[:n_e].reshape(n_k, len(nodes)).T  # knot-major, as numbered in ``_design``
        model = "line" if strength >= _LAMBDAS[0] else "smooth"
        dof = 2.0 if model == "line" else max(2.0, n_k * 0.25)
        # the residuals' spread over what the fit left free: each node's curve and each
        # kind and pair's latency took some of it (rows no more than those: no residual
        # tells the error, however small the residuals are)
        used = rows[keep]
        left = used.size - dof * len(nodes) - int(np.unique(g_inv[used]).size)
        sigma = float(np.sqrt(np.sum(res ** 2) / left)) if left > 0 else np.nan
        for i, n in enumerate(nodes):
            grid = u0 + (np.arange(n_k) + 0.5) * width - c[n]
            kn = np.union1d(knots[n], grid)
            step = curve_at(grid, -e[i], kn)
            values[n] = curve_at(knots[n], values[n], kn) + step
            knots[n] = kn
            n_rows = int(np.count_nonzero((lo[used] == n) | (hi[used] == n)))
            curves.error[n] = (sigma * np.sqrt(dof / n_rows) if n_rows > dof else np.nan)
            if curves.model[n] != "smooth":
                curves.model[n] = model
        curves.samples = int(rows.size)
        curves.residual = float(np.sqrt(np.mean(res ** 2)))
    curves.windows, curves.window_ticks = n_k, width
    return width


def late_window_us(o: FitOptions, span_s: float) -> float:
    """The joint rounds' margin for a late window (after the first round) in a run of
    ``span_s`` seconds: ``late_window_us``, or less in a run shorter than ``short_span_s``
    (over which no wander bends a curve), down to ``short_late_us``."""
    if o.short_span_s <= 0 or span_s >= o.short_span_s:
        return o.late_window_us
    scaled = o.late_window_us * (span_s / o.short_span_s) ** 2
    return max(scaled, min(o.short_late_us, o.late_window_us))


def _missed_drift(r: np.ndarray, u: np.ndarray, d_key: np.ndarray, n_kinds: int, u0: float,
                  width: float, tol: float) -> bool:
    """Do the first lines seem to miss a drift by more than ``tol`` ticks? Per kind and node
    pair, the half difference of the two directions' fastest residuals in each window of
    ``width`` that has both and whose two fastest sum to within ``tol`` of the least such
    sum (neither late; the lines' error there plus half the difference of the two
    directions' least latencies): true when its median distance from its median over
    those windows exceeds ``tol`` for every kind of some node pair (a missed rate change
    moves the windows of every kind), or no node pair has a kind with three such windows
    (a pair without, late one way or the other in every window, tells nothing)."""
    groups, at = np.unique(d_key // 2, return_inverse=True)
    win = ((u - u0) // width).astype(np.int64)
    n_win = int(win.max()) + 1
    gi, wi, centre = two_way_centres(r, at.ravel(), d_key % 2, win, groups.size, n_win, tol)
    half = np.full((groups.size, n_win), np.nan)
    half[gi, wi] = centre
    g = np.flatnonzero(np.isfinite(half).sum(axis=1) >= 3)  # with three such windows
    if g.size:
        spread = np.nanmedian(np.abs(half[g] - np.nanmedian(half[g], axis=1)[:, None]),
                              axis=1)
    else:
        spread = np.zeros(0)
    pairs, pair_at = np.unique(groups // n_kinds, return_inverse=True)
    pair_min = np.full(pairs.size, np.inf)
    np.minimum.at(pair_min, pair_at.ravel()[g], spread)
    told = np.isfinite(pair_min)  # a pair late one way or the other in every window tells
    return bool((pair_min[told] > tol).any() or not told.any())  # nothing


def _moved(knots0: list, values0: list, knots: list, values: list, tol: float) -> bool:
    """Does any node's curve leave its earlier one by more than ``tol`` ticks at a knot?"""
    for k0, v0, k1, v1 in zip(knots0, values0, knots, values, strict=True):
        if k0 is not None and k1 is not None and v0 is not None and v1 is not None:
            if np.abs(curve_at(k0, v0, k1) - v1).max() > tol:
                return True
    return False


def _grid_width(span: float, u: np.ndarray, d_key: np.ndarray, r: np.ndarray | None,
                o: FitOptions, late_ticks: float, n_kinds: int, hz: float
                ) -> tuple[float, float]:
    """The joint rounds' window width and that of the windows their late messages are told
    on (``_joint_rounds``): ``window_messages`` messages per direction of a kind
    (the median over the directions), but at most ``_DENSEST_SHARE`` times the width that
    holds ``window_messages`` messages of each node pair's densest direction (of any kind;
    the median over the pairs); no more than ``max_knots`` windows. With the residuals ``r``
    under some curves, the timely messages only (within four times ``outlier_us`` of the
    direction's fastest). A pair whose one direction is received late in most exchanges
    (MPI every 10 s: one timely message in 110 s one way, every 5 s the other) made the
    median's windows as long as the wander's period (150 s against 3 minutes); each row
    pins the offset given its kind's latency, which the windows with both directions pin,
    so the other direction's messages keep the curve's detail. Where those windows are long
    and the run is too (``_SPARSE_WIDTH_S``), windows of ``_SPARSE_MIN_S``, late messages
    told on windows of about one exchange."""
    def fitted(w: float) -> float:  # a whole number of windows, at most ``max_knots``
        return span / int(min(max(1, np.ceil(span / w)), o.max_knots))

    timely = np.ones(d_key.size, dtype=bool)
    if r is not None:
        gmin = np.full(int(d_key.max()) + 1, np.inf)
        np.minimum.at(gmin, d_key, r)
        timely = r <= gmin[d_key] + 4.0 * late_ticks
    keys, period = _periods(d_key[timely], u[timely])
    width = span
    if period.size:
        width = _clamped(o.window_messages * float(np.median(period)), span, o)
        # per node pair its densest direction (d_key // 2 = pair * n_kinds + kind)
        pairs, at = np.unique(keys // (2 * n_kinds), return_inverse=True)
        densest = np.full(pairs.size, np.inf)
        np.minimum.at(densest, at.ravel(), period)
        width = min(width, _DENSEST_SHARE * _clamped(
            o.window_messages * float(np.median(densest)), span, o))
        if r is not None and width >= _SPARSE_WIDTH_S * hz:
            spacing = float(np.median(_periods(d_key, u)[1]))  # every message, late or not
            if span >= _SPARSE_MESSAGES * spacing:
                judge = min(width, max(_SPARSE_SPACINGS * spacing, _SPARSE_MIN_S * hz))
                fine = fitted(min(width, _SPARSE_MIN_S * hz))
                return fine, max(fine, fitted(judge))
    usual = fitted(width)
    return usual, usual


def _late_windows(floor: np.ndarray, key: np.ndarray, d_key: np.ndarray, n_k: int,
                  late_window: float, reach: float = 0.0) -> np.ndarray:
    """Per message: is its window one whose fastest messages that way all came late? Where
    the window has messages both ways, judged on the sum of the two directions' fastest
    residuals there (twice the least latency plus any lateness, whatever the error of the
    curves, which moves the two by opposite amounts) against the least such sum of the kind
    and node pair over the run; else on the direction's fastest there against its fastest
    over the run."""
    n_dir = int(d_key.max()) + 1
    gmin = np.full(n_dir, np.inf)
    np.minimum.at(gmin, d_key, floor[key])
    fo, total, least = _window_sums(floor, key, d_key, n_k)
    both = np.isfinite(fo)
    late_sum = total > least[d_key // 2] + late_window
    # a late sum names the direction that rose far above its own least over the run; the
    # other, risen by under a tenth of that, stays timely (lateness is milliseconds, a
    # missed drift moves the two by the same amount in opposite ways), where the pair has
    # ``_SPARING_WINDOWS`` windows or more whose sum is not late (else its least sum may
    # itself hold a late message)
    least_of_dir = np.full(n_dir + 1, np.inf)  # gmin, and +inf for the odd direction past it
    least_of_dir[:n_dir] = gmin
    rise, rise_other = floor[key] - gmin[d_key], fo - least_of_dir[d_key ^ 1]
    good = _windows_of(key[both & ~late_sum & (d_key % 2 == 0)], 2 * n_k, n_dir // 2 + 1)
    # (or, with fewer such windows, where the direction's window lies within what the rate
    # limit lets its direction's other windows allow, ``reach`` ticks a window, as most of
    # its windows do: a direction timely in most exchanges, whose pair's other direction was
    # timely in too few of them to give three sums)
    steady = _within_reach(floor, n_dir, n_k, reach, late_window)[key] if reach > 0 else False
    spared = ((rise < _SPARED_RISE * rise_other) & (rise_other > late_window)
              & ((good[d_key // 2] >= _SPARING_WINDOWS) | steady))
    return np.where(both, late_sum & ~spared, floor[key] > gmin[d_key] + late_window)


def _late_after_first(floor: np.ndarray, key: np.ndarray, d_key: np.ndarray, n_k: int,
                      margin: float, gmin: np.ndarray, reach: float) -> np.ndarray:
    """Per message, after the joint rounds' first round (``floor``, ``key``, ``d_key`` as in
    ``_late_windows``; ``gmin`` each direction's fastest): is its window late? Its fastest
    lies more than ``margin`` above its direction's least (``_clustered_least``), unless
    the two-way sums say the curves miss its pair (``_sum_timely``) or its direction is
    steady within ``reach`` ticks a window (``_within_reach``: timely in most windows,
    under curves whose error still drifts by up to ``_LOCAL_PPM``)."""
    least = _clustered_least(floor, n_k, margin, _LEAST_WINDOWS, gmin)
    late = floor[key] > least[d_key] + margin
    # where that test sets aside most windows whose two-way sums are good, the curves miss
    # the pair (by more than the margin): the sums decide
    late &= ~_sum_timely(floor, key, d_key, n_k, margin, late)
    if reach > 0:
        n_dir = int(d_key.max()) + 1
        steady = _within_reach(floor, n_dir, n_k, reach, margin)[key]
        # only where the least's test sets aside most of a direction's steady windows
        in_reach = _windows_of(key[steady], n_k, n_dir)
        set_aside = _windows_of(key[steady & late], n_k, n_dir)
        late &= ~(steady & (set_aside[d_key] >= _LOCAL_SHARE * in_reach[d_key]))
    return late


def _windows_of(window_key: np.ndarray, n_k: int, n_groups: int) -> np.ndarray:
    """Per group, how many distinct windows ``window_key`` (group * ``n_k`` + window, one
    entry per message) holds."""
    return np.bincount(np.unique(window_key) // n_k, minlength=n_groups)


def _window_sums(floor: np.ndarray, key: np.ndarray, d_key: np.ndarray, n_k: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per message: the other direction's fastest in its window (+inf where none) and the
    sum of the two directions' fastest there; per kind and node pair (``d_key // 2``) the
    least such sum over the run (+inf where no window has both)."""
    other = (d_key ^ 1) * n_k + key % n_k  # the same window, the other direction
    fo = np.full(key.size, np.inf)
    have = other < floor.size
    fo[have] = floor[other[have]]
    both = np.isfinite(fo)
    total = floor[key] + fo
    least = np.full((int(d_key.max()) + 1) // 2 + 1, np.inf)
    np.minimum.at(least, d_key[both] // 2, total[both])
    return fo, total, least


def _sum_timely(floor: np.ndarray, key: np.ndarray, d_key: np.ndarray, n_k: int,
                margin: float, late: np.ndarray) -> np.ndarray:
    """Per message (``floor``, ``key``, ``d_key`` as in ``_late_windows``): does its window
    hold both directions, their fastest summing to within ``margin`` of the least such sum
    of its kind and node pair (neither late, whatever the curves' error there), in a pair
    with ``_SUM_GOOD`` such windows or more, of which ``late`` (per message) sets aside
    ``_SUM_SHARE`` or more?"""
    n_pair = (int(d_key.max()) + 1) // 2 + 1
    fo, total, least = _window_sums(floor, key, d_key, n_k)
    ok = np.isfinite(fo) & (total <= least[d_key // 2] + margin)
    wkey = (d_key // 2) * n_k + key % n_k  # the pair's window, both directions
    good = _windows_of(wkey[ok], n_k, n_pair)
    dropped = _windows_of(wkey[ok & late], n_k, n_pair)
    pair = d_key // 2
    return ok & (good[pair] >= _SUM_GOOD) & (dropped[pair] >= _SUM_SHARE * good[pair])


def _clustered_least(floor: np.ndarray, n_win: int, band: float, lows: int,
                     least: np.ndarray) -> np.ndarray:
    """Per direction (``floor`` per direction * ``n_win`` + window: its fastest residual
    there, +inf where none), the lowest of its ``lows`` lowest window fastest that has at
    least half the direction's windows, and ``_LEAST_CLUSTER`` at least, within ``band``
    above it; ``least`` (each direction's single fastest) where none has. A direction
    timely in most windows has them within the latency's jitter of each other; a window or
    two the curve dipped under stand alone below them (late windows scatter by
    milliseconds, so a direction timely in few keeps its fastest)."""
    have = np.flatnonzero(np.isfinite(floor))
    out = least.copy()
    if have.size == 0:
        return out
    dirs, f = have // n_win, floor[have]
    order = np.lexsort((f, dirs))
    dirs, f = dirs[order], f[order]
    start = np.flatnonzero(np.r_[True, dirs[1:] != dirs[:-1]])
    size = np.diff(np.r_[start, dirs.size])
    rank = np.repeat(np.arange(start.size), size)
    stride = float(np.ptp(f)) + 2.0 * band + 1.0
    flat = rank * stride + (f - f.min())  # sorted: direction, then fastest
    found = np.full(start.size, np.nan)
    for i in range(lows - 1, -1, -1):  # the lowest that qualifies wins
        at = start + i
        ok = i < size
        within = np.searchsorted(flat, flat[at[ok]] + band, side="right") - at[ok]
        good = (2 * within >= size[ok]) & (within >= _LEAST_CLUSTER)
        found[np.flatnonzero(ok)[good]] = f[at[ok][good]]
    d = dirs[start]
    out[d] = np.where(np.isnan(found), out[d], found)
    return out


def _within_reach(floor: np.ndarray, n_dir: int, n_k: int, reach: float, margin: float
                  ) -> np.ndarray:
    """Per window of every direction (``floor`` per direction * ``n_k`` + window, +inf where
    none): does its fastest lie within ``margin`` of what the others of its direction allow,
    the least ``floor[j] + reach * |w - j|`` over its other windows j (``oneway.above_reach``),
    in a direction whose windows mostly do (``_STEADY_SHARE`` of them and
    ``_STEADY_WINDOWS`` at least)? False where not."""
    flat = np.full(n_dir * n_k, np.inf)
    flat[:floor.size] = floor[:n_dir * n_k]
    y = flat.reshape(n_dir, n_k)
    ok = np.isfinite(y) & ~above_reach(np.arange(n_k, dtype=np.float64), y, reach, margin)
    n_ok, n_have = ok.sum(axis=1), np.isfinite(y).sum(axis=1)
    steady = (n_ok >= _STEADY_SHARE * n_have) & (n_ok >= _STEADY_WINDOWS)
    return (ok & steady[:, None]).ravel()[:floor.size]


def _residuals(ta: np.ndarray, tb: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray,
               knots: list, values: list) -> np.ndarray:
    """Every message's delay under the curves (reference ticks)."""
    return (tb + c[b] + offsets_at(knots, values, b, tb)) - (
        ta + c[a] + offsets_at(knots, values, a, ta))


def _design(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, sign: np.ndarray,
            j0: np.ndarray, frac: np.ndarray, g_inv: np.ndarray, col_of: np.ndarray,
            n_fit: int, n_k: int, n_x: int) -> Compressed:
    """The equations of ``rows``: +-(E_hi - E_lo) on the hat basis, plus the group's least
    latency. The unknowns are numbered knot-major (every fitted node's value at knot 0, then
    at knot 1, ..., the ``n_fit`` nodes' values at knot j in columns ``j * n_fit ...``), the
    latency columns last: messages couple nodes at one knot and its neighbour and the
    penalty a node's knots two apart, so the normal matrix is a band about three nodes wide
    bordered by the latency columns, and its factor in that order stays a band (``_solve``;
    a fill-reducing ordering of node-major unknowns, MMD or COLAMD, filled it 3-9x and took
    10-100x longer, depending on how the nodes are linked)."""
    n = rows.size
    n_g = int(g_inv.max()) + 1
    ri, ci, vi = [np.arange(n)], [(n_x - n_g) + g_inv[rows]], [np.ones(n)]
    for node, s in ((hi, 1.0), (lo, -1.0)):
        cn = col_of[node[rows]]
        ok = cn >= 0
        for dj, wgt in ((0, 1.0 - frac[rows]), (1, frac[rows])):
            if n_k == 1 and dj == 1:
                continue
            ri.append(np.arange(n)[ok])
            ci.append((j0[rows][ok] + dj) * n_fit + cn[ok])
            vi.append((s * sign[rows] * wgt)[ok])
    return from_triplets(np.concatenate(vi), np.concatenate(ri), np.concatenate(ci), (n, n_x))


def _penalty(n_nodes: int, n_k: int, n_x: int) -> Compressed:
    """Second differences of every node's grid values (zero on the latency columns), the
    unknowns numbered knot-major as in ``_design``: D'D for D with a row per node and knot
    j < n_k - 2, (1, -2, 1) at that node's knots j, j + 1, j + 2."""
    if n_k < 3 or n_nodes == 0:
        return zeros((n_x, n_x))
    row = np.arange((n_k - 2) * n_nodes)
    full = from_triplets(np.tile([1.0, -2.0, 1.0], row.size), np.repeat(row, 3),
                         (np.repeat(row, 3) + np.tile([0, 1, 2], row.size) * n_nodes),
                         (row.size, n_x))
    return (full.T @ full).converted("csr")


def _solve(mat: Compressed, rhs: np.ndarray, pen: Compressed,
           strength: float, fill_reducing: bool = False) -> np.ndarray:
    return _solve_normal(mat.T @ mat, mat.T @ rhs, pen, strength, fill_reducing)


def _solve_normal(gram: Compressed, mat_t_rhs: np.ndarray, pen: Compressed,
                  strength: float, fill_reducing: bool = False) -> np.ndarray:
    """The penalized least-squares solution from the normal equations' parts (``gram`` =
    mat.T @ mat, ``mat_t_rhs`` = mat.T @ rhs), which a caller solving for several strengths
    computes once; ``fill_reducing``: factored in a minimum degree order (more than
    ``_NATURAL_ORDER_NODES`` nodes), else in the unknowns' own."""
    normal = (gram + strength * pen + identity(gram.shape[1], 1e-9)).converted("csc")
    # the unknowns knot-major (``_design``): in natural order the factor stays a band as
    # wide as a knot's nodes; the matrix is symmetric positive definite, so its diagonal
    # pivots are taken: with SuperLU's default row pivoting the weak strengths (``_FINER``,
    # a small diagonal) took 0.5-0.7 s each on a 12-node ring's 4,412 unknowns instead of 0.01
    try:
        return solve_diagonal(normal, mat_t_rhs, fill_reducing)
    except RuntimeError:  # exactly singular (a node no timely message pins): no solution
        return np.full(gram.shape[1], np.nan)


def _choose(mat: Compressed, rhs: np.ndarray, pen: Compressed,
            win: np.ndarray, o: FitOptions, folds: int = 3,
            fill_reducing: bool = False) -> float:
    """The penalty strength: cross-validated over ``folds`` interleaved sets of windows,
    the strongest (straightest) within ``simpler_within`` of the best of ``_LAMBDAS``; or
    of ``_FINER`` too, where one of those predicts ``_FINER_GAIN`` times better over
    ``_FINER_WINDOWS`` windows or more."""
    # the weaker strengths scored only where they may be taken
    grid = _LAMBDAS + (_FINER if np.unique(win).size >= _FINER_WINDOWS else ())
    fold = win % folds
    scores = [0.0] * len(grid)
    for f in range(folds):  # the fold's normal equations once, solved for every strength
        test = fold == f
        if not test.any() or test.all():
            continue
        train = mat.rows(~test)
        gram, mat_t_rhs = train.T @ train, train.T @ rhs[~test]
        held, held_rhs = mat.rows(test), rhs[test]
        for i, strength in enumerate(grid):
            x = _solve_normal(gram, mat_t_rhs, pen, strength, fill_reducing)
            scores[i] += float(np.sum((held @ x - held_rhs) ** 2))
    scores = [sc if np.isfinite(sc) else np.inf for sc in scores]
    base = len(_LAMBDAS)
    if len(grid) > base and not min(scores[base:]) * _FINER_GAIN <= min(scores[:base]):
        grid, scores = _LAMBDAS, scores[:base]
    best = min(scores)
    if not np.isfinite(best):
        return _LAMBDAS[0]
    return next(lam for lam, sc in zip(grid, scores, strict=True)
                if sc <= o.simpler_within * best + 1e-9)


def _support_lines(group: np.ndarray, fwd: np.ndarray, t: np.ndarray, r: np.ndarray,
                   near: float = 0.0, bracket: float = 1e-3, iters: int = 60
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group with delays ``r`` at times ``t`` both ways, the offset difference
    ``d0 + beta * t`` midway between the two directions' lower support lines, the lines
    sloped alike and opposite (a clock difference that drifts lengthens one direction's
    delays as it shortens the other's) and as high as they go together at t = 0: late
    receives lie above them. Returns (groups, d0, beta, support, most): ``support`` the
    fewer, of the two directions, of the messages within ``near`` of their line (what pins
    it), ``most`` the more; the slope by golden section (the lines' summed height at 0 is
    concave in it)."""
    key = group * 2 + (~fwd)
    order = np.lexsort((t, key))
    k, rs = key[order], r[order]
    ts = np.where(k % 2 == 0, t[order], -t[order])  # backward: the opposite slope
    start = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    sk = k[start]
    both = np.flatnonzero((sk[:-1] % 2 == 0) & (sk[1:] == sk[:-1] + 1))
    if both.size == 0:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0)
    seg = np.repeat(np.arange(start.size), np.diff(np.r_[start, k.size]))
    pair_of = np.full(start.size, -1)
    pair_of[both], pair_of[both + 1] = np.arange(both.size), np.arange(both.size)
    keep = pair_of[seg] >= 0
    seg, ts, rs = pair_of[seg][keep] * 2 + (k[keep] % 2), ts[keep], rs[keep]
    first = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]])

    def heights(beta: np.ndarray) -> np.ndarray:
        return np.minimum.reduceat(rs - beta[seg // 2] * ts, first).reshape(-1, 2)

    def total(beta: np.ndarray) -> np.ndarray:
        return heights(beta).sum(axis=1)

    lo = np.full(both.size, -bracket)
    hi = np.full(both.size, bracket)
    gold = (np.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = hi - gold * (hi - lo), lo + gold * (hi - lo)
    h1, h2 = total(x1), total(x2)
    for _ in range(iters):
        right = h1 < h2
        lo, hi = np.where(right, x1, lo), np.where(right, hi, x2)
        new = np.where(right, lo + gold * (hi - lo), hi - gold * (hi - lo))
        hn = total(new)
        x1, h1, x2, h2 = (np.where(right, x2, new), np.where(right, h2, hn),
                          np.where(right, new, x1), np.where(right, hn, h1))
    beta = 0.5 * (lo + hi)
    h = heights(beta)
    gap = rs - beta[seg // 2] * ts - h.ravel()[seg]
    count = np.bincount(seg, weights=(gap <= near).astype(float),
                        minlength=2 * both.size).reshape(-1, 2)
    return (sk[both] // 2, 0.5 * (h[:, 0] - h[:, 1]), beta, count.min(axis=1),
            count.max(axis=1))


def _window_width(d_key: np.ndarray, u: np.ndarray, span: float, o: FitOptions) -> float:
    """Windows hold about ``window_messages`` messages per direction of a kind (the median
    over the directions), and are at most ``max_windows``."""
    period = _periods(d_key, u)[1]
    if not period.size:
        return span
    return _clamped(o.window_messages * float(np.median(period)), span, o)


def _periods(d_key: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per direction (``d_key``) with two messages or more: its key and the mean interval
    between its messages (times ``u``)."""
    order = np.lexsort((u, d_key))
    k, t = d_key[order], u[order]
    start = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    end = np.r_[start[1:], k.size]
    count = end - start
    many = count > 1
    period = (t[end[many] - 1] - t[start[many]]) / (count[many] - 1)
    return k[start[many]], period


def _clamped(w: float, span: float, o: FitOptions) -> float:
    """A window width within the run, at least a tick, and no more than ``max_windows``
    windows."""
    return float(min(max(w, span / max(o.max_windows, 1), 1.0), span))


def _window_offsets(w: np.ndarray, lo: np.ndarray, hi: np.ndarray, delta: np.ndarray,
                    n_win: int, n_nodes: int, ref: int, weight: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per window, least squares over its samples ``E[w, hi] - E[w, lo] = delta`` (each
    with its ``weight``, 1 by default; 0: not a sample) with the reference at 0. Returns
    (E [window, node], linked [window, node]: the node has a path of
    samples to the reference in that window)."""
    if weight is not None:
        use = weight > 0
        w, lo, hi, delta, weight = w[use], lo[use], hi[use], delta[use], weight[use]
    size = n_win * n_nodes
    va, vb = w * n_nodes + lo, w * n_nodes + hi
    _, lab = weak_components(size, va, vb)
    refs = np.arange(n_win) * n_nodes + ref
    linked = (lab == np.repeat(lab[refs], n_nodes)).reshape(n_win, n_nodes)
    e = np.zeros((n_win, n_nodes))
    unknown = linked.ravel().copy()
    unknown[refs] = False
    if not unknown.any():
        linked[:, ref] = True
        return e, linked
    col = np.full(size, -1)
    col[unknown] = np.arange(int(unknown.sum()))
    ok = linked.ravel()[va]
    ca, cb, d = col[va[ok]], col[vb[ok]], delta[ok]
    sw = np.sqrt(weight[ok]) if weight is not None else np.ones(d.size)
    d = d * sw
    rows = np.arange(d.size)
    m = [(rows[cb >= 0], cb[cb >= 0], sw[cb >= 0]), (rows[ca >= 0], ca[ca >= 0], -sw[ca >= 0])]
    mat = from_triplets(np.concatenate([s for _, _, s in m]),
                        np.concatenate([r for r, _, _ in m]),
                        np.concatenate([cc for _, cc, _ in m]), (d.size, int(unknown.sum())))
    normal = (mat.T @ mat).converted("csc")
    sol = np.atleast_1d(spsolve(normal, mat.T @ d))
    flat = e.ravel()
    flat[unknown] = sol
    return flat.reshape(n_win, n_nodes), linked


def smooth(y: np.ndarray, w: np.ndarray, o: FitOptions, outlier: float = np.inf
           ) -> tuple[np.ndarray, str, float]:
    """A node's curve over the windows from its samples ``y`` (weights ``w``, 0 where none):
    samples further than ``outlier`` ticks (or 8 robust deviations, whichever is more) from
    the running median of their neighbours set aside (a window whose fastest messages one way
    were all received late), then the simplest of a constant, a line and penalized curves
    (second differences, smoothest first) whose cross-validated error is within
    ``simpler_within`` of the best, refitted once with robust weights. Returns (values,
    model, expected RMS error in ticks)."""
    n = y.size
    w = w * _inliers(y, w, outlier)
    ok = np.flatnonzero(w > 0)
    if ok.size == 0:
        return np.zeros(n), "none", np.nan
    cands: list[tuple[str, float]] = [("constant", 0.0)]
    if ok.size >= 2:
        cands.append(("line", 0.0))
    if ok.size >= 2 * max(o.folds, 2) and n >= 4:
        cands += [("smooth", lam) for lam in _LAMBDAS]
    cands = [cd for cd in cands if cd[0] in o.models] or [("constant", 0.0)]
    if len(cands) > 1:
        folds = max(2, min(o.folds, ok.size))
        fold = np.full(n, -1)
        fold[ok] = np.arange(ok.size) % folds
        scores = []
        for model, lam in cands:
            err = 0.0
            for f in range(folds):
                wt = np.where(fold == f, 0.0, w)
                s = _fit(model, lam, y, wt)
                test = fold == f
                err += float(np.sum(w[test] * (y[test] - s[test]) ** 2))
            scores.append(err)
        best = min(scores)
        pick = next(i for i, sc in enumerate(scores) if sc <= o.simpler_within * best + 1e-9)
    else:
        pick = 0
    model, lam = cands[pick]
    s = _fit(model, lam, y, w)
    res = (y - s)[ok]
    scale = 1.4826 * float(np.median(np.abs(res)))
    if scale > 0 and ok.size > 3:
        robust = np.clip(1.0 - (np.abs(y - s) / (4.685 * scale)) ** 2, 0.0, None) ** 2
        w2 = w * robust
        if np.count_nonzero(w2) >= 2:
            s = _fit(model, lam, y, w2)
            w = w2
    df = _dof(model, lam, w)
    resid = float(np.sum(w * (y - s) ** 2))
    dof_left = float(np.sum(w > 0)) - df
    sigma = np.sqrt(resid / dof_left) if dof_left > 0 else np.nan
    error = float(sigma * np.sqrt(df / max(float(np.sum(w > 0)), 1.0)))
    return s, model, error


def _inliers(y: np.ndarray, w: np.ndarray, outlier: float, half: int = 3) -> np.ndarray:
    """1 for the samples near the running median of their weighted neighbours, else 0."""
    ok = np.flatnonzero(w > 0)
    keep = np.ones(y.size)
    if ok.size < 2 * half + 2:
        return keep
    v = y[ok]
    pad = np.r_[np.full(half, v[0]), v, np.full(half, v[-1])]
    win = np.lib.stride_tricks.sliding_window_view(pad, 2 * half + 1)
    med = np.median(win, axis=1)
    dev = np.abs(v - med)
    scale = 1.4826 * float(np.median(dev))
    keep[ok[dev > max(8.0 * scale, outlier)]] = 0.0
    return keep


def _fit(model: str, lam: float, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    n = y.size
    t = np.arange(n, dtype=np.float64)
    sw = float(w.sum())
    if sw <= 0:
        return np.zeros(n)
    mean = float(np.sum(w * y) / sw)
    if model == "constant":
        return np.full(n, mean)
    tm = float(np.sum(w * t) / sw)
    var = float(np.sum(w * (t - tm) ** 2))
    if model == "line" or var <= 0:
        if var <= 0:
            return np.full(n, mean)
        slope = float(np.sum(w * (t - tm) * (y - mean)) / var)
        return mean + slope * (t - tm)
    ab = _banded(w, lam)
    try:
        return solveh_banded(ab, w * y)
    except (np.linalg.LinAlgError, ValueError):
        return _fit("line", 0.0, y, w)


def _banded(w: np.ndarray, lam: float) -> np.ndarray:
    """``diag(w) + lam * D'D`` (D: second differences) in solveh_banded's upper form."""
    n = w.size
    ones = np.ones(n - 2)
    ab = np.zeros((3, n))
    ab[2] = w + lam * np.convolve(ones, [1.0, 4.0, 1.0])
    ab[1, 1:] = lam * np.convolve(ones, [-2.0, -2.0])
    ab[0, 2:] = lam * ones
    ab[2] += 1e-9 * lam  # a curve no window pins stays defined
    return ab


def _dof(model: str, lam: float, w: np.ndarray, probes: int = 8) -> float:
    """Degrees of freedom of the fit (trace of its hat matrix; Hutchinson's estimate for
    the penalized curves)."""
    if model == "constant":
        return 1.0
    if model == "line":
        return 2.0
    ab = _banded(w, lam)
    rng = np.random.default_rng(0)
    v = rng.choice([-1.0, 1.0], size=(w.size, probes))
    try:
        hv = solveh_banded(ab, w[:, None] * v)
    except (np.linalg.LinAlgError, ValueError):
        return 2.0
    return float(np.clip(np.mean(np.sum(v * hv, axis=0)), 1.0, float(np.sum(w > 0))))
