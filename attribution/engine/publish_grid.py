"""Where poll-stamped power readings were published: their publish intervals, the readings a
repeated value hid, and the sensor's publish grid.

Owns the readings of a log timestamped by the poll that first showed each value (nvidia-smi
logs; ``timebase.Readings.spread_ns``): each reading's publish interval (since the previous
poll), the sensor's publish period (the grid's, not the spacing of changes of value), the
readings such a log hides when the sensor publishes the same value again (it marks readings
by a change of value), the narrowing of the intervals by the publish grid, and, for a log
whose polls keep the sensor's period, how locked they are and where the delay from publish to
stamp is, so that each reading can be moved to its publish.

One poll alone only says the reading was published since the previous poll (≈ 12 ms at
``-lms 10``, half an A100 window).  But the sensor publishes on a regular period T (the SC'24
study's update periods; the real A100 and RTX 3090 logs in ../shared fit one to a
millisecond), so reading k was published at ``φ + n_k·T`` and every neighbour's interval,
moved by whole periods, bounds it as well: the intersection over ``GRID_NEIGHBOURS`` readings
either side is typically 1–2 ms wide.  Each reading keeps the part of its own interval that
its neighbours agree on, widened by ``GRID_MARGIN_MS`` for the sensor's publish jitter and the
drift over the neighbourhood.  Where the neighbours disagree (a jittery or irregular sensor, a
restart) the reading keeps its own interval, and where too few agree the grid is not used.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import maximum_filter1d, minimum_filter1d

from attribution.model import F64, I64, B

GRID_NEIGHBOURS = 8
"""Readings either side whose intervals, moved by whole periods, bound a reading's publish."""
GRID_MARGIN_MS = 0.5
"""Widening of the neighbours' bound, either side: the sensor's publish jitter and the drift
over the neighbourhood (the simulator's 0.2 ms jitter: every publish inside; a sensor that
jitters more shows as readings whose own interval misses the bound, see ``narrow``)."""
GRID_MIN_AGREEING = 0.75
"""Fraction of readings whose neighbourhood must agree on one grid for the grid to be used."""
GRID_MIN_READINGS = 4 * GRID_NEIGHBOURS
"""Fewer readings than this: no grid (the neighbourhoods would be most of the log)."""
SLOW_POLLS = 1.5
"""Readings spaced more than this many sensor periods apart come from a log polling more
slowly than the sensor publishes."""
PERIOD_SCAN = (0.4, 1.4, 0.02)
"""Candidate publish periods, as (start, stop, step) multiples of the readings' median
spacing; the step only has to count whole periods right (the grid measures T itself)."""
SUBMULTIPLE_EVEN = 0.75
"""A grid whose readings are this often an even number of its periods apart is half the
sensor's (it agrees with at least as many readings as the sensor's own; the real RTX A5000
transient log's instant field, with a few readings between its 100 ms publishes, read
49.98 ms)."""
LOCKED_POLLS = 0.1
"""Stamps of new values whose phase on the publish grid scatters (IQR) less than this share
of the poll gap come from polls locked to the sensor (simulated: 0.00-0.08 locked, 0.31-0.50
free; real logs: A100 200 s 0.07, V100 0.03, A100 transient 0.42, RTX 3090/4090/A5000
0.14-0.24)."""
POLL_WRAPS = 0.02
"""Locked polls with fewer than 3 per period (a flip's direction not told) keep one delay
from publish to stamp where under this share of the readings lie on the rarer side of the
stamps' phase jumps (each over half a poll gap)."""
ARC_SHARE = 0.99
"""Locked polls: the share of the readings the arc of their stamps' phases must hold (the
rest, a stray stamp, does not set where the publishes sit)."""
ARC_MAX = 0.75
"""Locked polls whose stamps' phases need more than this share of the period are not placed
(one delay after the publish would not describe them)."""
PERIOD_REFINE = (3e-4, 61)
"""The period's refinement for placing locked polls: ± this relative span in this many
steps, then again round the best at one step's span (its steps 3e-7 relative: a drift under
0.05 ms over 10 000 periods of 20 ms)."""
REFINE_READINGS = 20_000
"""Readings the period's refinement looks at (a longer log is thinned evenly)."""
PHASE_RUN = 21
"""Readings over which the stamps' phase is taken as locally constant (its running median)."""
PERIOD_READINGS = 1024
"""Readings the period is judged on (the first ones)."""
GRID_SPAN = 50
"""Readings over which the grid's period is measured (each slope's error ≈ spread / span)."""


def stamp_resolution_ns(t_ns: I64) -> int:
    """The timestamps' resolution (nvidia-smi prints milliseconds): 1 ms, 1 µs or 1 ns, judged
    on their differences from the first, so that a shift of the whole timeline moves nothing."""
    for r in (1_000_000, 1_000):
        if len(t_ns) and not bool(np.any((t_ns - t_ns[0]) % r)):
            return r
    return 1


def period_index(t_ns: I64, period_ns: float) -> I64:
    """Whole periods since the first reading, each step at least one (a gap of k periods,
    readings the log lost, counts k)."""
    steps = np.maximum(np.rint(np.diff(t_ns) / period_ns), 1.0).astype(np.int64)
    return np.concatenate(([0], np.cumsum(steps))).astype(np.int64)


def _either_side(x: F64, half: int, how: str) -> F64:
    """Running max (``how="max"``) or min over the ``half`` values either side of each value,
    the value itself left out (clipped at the ends)."""
    fill = -np.inf if how == "max" else np.inf
    run_filter = maximum_filter1d if how == "max" else minimum_filter1d
    n = len(x)
    padded = np.concatenate((np.full(half, fill), x, np.full(1, fill)))
    # run[j]: the extreme of padded[j : j + half] (a window starting at j)
    run = run_filter(padded, size=half, mode="constant", cval=fill, origin=-(half // 2))
    left, right = run[:n], run[half + 1:half + 1 + n]
    out: F64 = np.maximum(left, right) if how == "max" else np.minimum(left, right)
    return out


def grid_period_ns(mid_ns: F64, n: F64) -> float:
    """The publish period on the host's clock: the median slope of the intervals' midpoints
    over ``GRID_SPAN`` readings (robust to a miscounted gap, unlike one straight-line fit)."""
    k = min(GRID_SPAN, len(n) // 4)
    slopes = (mid_ns[k:] - mid_ns[:-k]) / (n[k:] - n[:-k])
    return float(np.median(slopes))


def narrow(t_ns: I64, spread_ns: I64, period_ms: float, resolution_ns: int
           ) -> tuple[I64, I64, float]:
    """Publish intervals ``[t − spread, t]`` narrowed by the publish grid: the new upper ends,
    the new spreads, and the fraction of readings whose own interval meets the one their
    neighbours give (0 when the grid was not used: too few readings, or too few agreeing).
    ``resolution_ns``: the stamps' resolution (:func:`stamp_resolution_ns` of the polls): a
    printed stamp is the poll time truncated, so the poll may be up to that much later."""
    got = _grid_bounds(t_ns, spread_ns, period_ms, resolution_ns)
    if got is None:
        return t_ns, spread_ns, 0.0
    new_lo, new_hi, agree, _, _ = got
    share = float(np.mean(agree))
    if share < GRID_MIN_AGREEING:
        return t_ns, spread_ns, 0.0
    # a reading its neighbours disagree with keeps its own interval, up to the poll's time
    # (its stamp truncated: a poll just after the publish can print a stamp before it)
    late = resolution_ns if resolution_ns > 1 else 0
    new_t = np.where(agree, np.rint(new_hi), t_ns + late).astype(np.int64)
    new_spread = np.where(agree, new_t - np.rint(new_lo), spread_ns + late).astype(np.int64)
    return new_t, np.maximum(new_spread, 0), share


def _grid_bounds(t_ns: I64, spread_ns: I64, period_ms: float, resolution_ns: int
                 ) -> tuple[F64, F64, B, float, I64] | None:
    """Each reading's publish interval cut to its neighbours' bound (``narrow``): the lower
    and upper ends, whether the two met (where not, the ends cross), the grid's period (ns;
    ``period_ms`` only counts the periods between readings) and each reading's period
    count."""
    if len(t_ns) < GRID_MIN_READINGS or not np.isfinite(period_ms) or period_ms <= 0:
        return None
    lo = (t_ns - spread_ns).astype(np.float64)
    hi = t_ns.astype(np.float64) + (resolution_ns if resolution_ns > 1 else 0)  # truncated stamps
    n_i = period_index(t_ns, period_ms * 1e6)
    n = n_i.astype(np.float64)
    mid = 0.5 * (lo + hi)
    per = grid_period_ns(mid, n)
    base = per * n
    base += float(np.median(mid - base))
    margin = GRID_MARGIN_MS * 1e6
    g_lo = _either_side(lo - base, GRID_NEIGHBOURS, "max") + base - margin
    g_hi = _either_side(hi - base, GRID_NEIGHBOURS, "min") + base + margin
    new_lo, new_hi = np.maximum(g_lo, lo), np.minimum(g_hi, hi)
    return new_lo, new_hi, new_lo <= new_hi, per, n_i


def publish_period_ms(t_ns: I64, gap_ns: I64, spacing_ms: float, resolution_ns: int) -> float:
    """The sensor's publish period from poll-stamped readings (``t_ns``; ``gap_ns``: the time
    since each one's previous poll).  Their median spacing (``spacing_ms``) overstates it
    where a value repeats (a long kernel holds one power for several periods: a simulated
    V100's 20 ms read 24 ms, and W and every class followed), and the stamps themselves are
    periodic at the poll period.  So each candidate period is judged by the grid it implies:
    the share of readings whose interval meets their neighbours' bound (at least
    ``GRID_MIN_AGREEING``) times how much of a period the narrowed intervals leave open (the
    poll period leaves all of it, a wrong period no agreement); candidates ``PERIOD_SCAN`` ×
    the spacing count the periods between readings, and the best grid's own measured period
    is returned.  Not a candidate: a grid with readings mostly on every other slot
    (``SUBMULTIPLE_EVEN``)."""
    if len(t_ns) < GRID_MIN_READINGS or not np.isfinite(spacing_ms) or spacing_ms <= 0:
        return spacing_ms
    t_k, g_k = t_ns[:PERIOD_READINGS], gap_ns[:PERIOD_READINGS]
    poll_ms = float(np.median(g_k)) / 1e6
    best, best_score = spacing_ms, 0.0  # no grid that narrows anything: the spacing stays
    for cand in np.arange(*PERIOD_SCAN) * spacing_ms:
        if cand <= poll_ms:  # a sensor publishing faster than the log polls: not seen
            continue
        got = _grid_bounds(t_k, np.minimum(g_k, int(cand * 1e6)), float(cand), resolution_ns)
        if got is None:
            continue
        lo, hi, agree, per, n = got
        share = float(np.mean(agree))
        if not per > 0 or share < GRID_MIN_AGREEING:  # a grid narrow() would not use
            continue
        if float(np.mean(np.diff(n) % 2 == 0)) >= SUBMULTIPLE_EVEN:
            continue  # readings on every other slot: half the sensor's period
        width = np.where(agree, hi - lo, per)
        score = share * (1.0 - min(float(np.median(width)) / per, 1.0))
        if score > best_score + 1e-9:
            best, best_score = per / 1e6, score
    return best


def _phased_gap(t_ns: I64, polls_ns: I64, period_ms: float) -> float | None:
    """The median poll gap where the stamps have a phase on the publish grid to keep; None for
    too few readings or polls, or a log polling no faster than ``SLOW_POLLS`` per period
    (every poll a new value: no phase to keep)."""
    if len(t_ns) < GRID_MIN_READINGS or len(polls_ns) < 2 or not np.isfinite(period_ms) \
            or period_ms <= 0:
        return None
    gap = float(np.median(np.diff(polls_ns)))
    return gap if 0 < gap <= period_ms * 1e6 / SLOW_POLLS else None


def _stamp_phase(t_ns: I64, polls_ns: I64, period_ms: float) -> tuple[F64, float] | None:
    """The stamps' phase on the publish grid (ns from the first stamp, whole periods counted
    off) and the median poll gap; None where :func:`_phased_gap` is."""
    gap = _phased_gap(t_ns, polls_ns, period_ms)
    if gap is None:
        return None
    per = period_ms * 1e6
    return (t_ns - t_ns[0]).astype(np.float64) - period_index(t_ns, per) * per, gap


def poll_phase_scatter(t_ns: I64, polls_ns: I64, period_ms: float) -> float:
    """How locked a log's polls are to the sensor: the IQR of the new values' stamps about
    their running phase on the publish grid (``PHASE_RUN`` readings), over the median poll
    gap; NaN where :func:`_stamp_phase` is None.  Polls running free show a new value
    anywhere in the poll gap after its publish (≈ 0.3-0.5); polls that keep the sensor's
    period show it at one phase (under ``LOCKED_POLLS``).  A log polling no faster than 1.5
    polls per period (``nvidia-smi -l 1``: every poll a new value, its stamps on its own
    poll grid) has no phase to keep: NaN."""
    got = _stamp_phase(t_ns, polls_ns, period_ms)
    if got is None:
        return float("nan")
    phase, gap = got
    half = PHASE_RUN // 2
    padded = np.pad(phase, (half, half), mode="edge")
    run = np.median(np.lib.stride_tricks.sliding_window_view(padded, PHASE_RUN), axis=1)
    q25, q75 = np.percentile(phase - run, [25, 75])
    return float((q75 - q25) / gap)


def poll_delay_flips(t_ns: I64, polls_ns: I64, period_ms: float) -> I64 | None:
    """For locked polls (under ``LOCKED_POLLS``): how much later than the log's usual delay
    after its publish each reading was shown, in whole poll gaps.  The poll phase wanders;
    where it crosses a publish, the poll that first shows the new value moves by one gap (the
    delay flips between about 0 and a gap) while the publishes stay on their grid.  Each such
    jump of the stamps' phase on the grid (over half a gap between consecutive readings) is
    counted, and a reading's count against the log's most common one, times the gap, is its
    extra delay.  With fewer than 3 polls per period a jump of a gap is half a period or more
    and its direction is not told: zeros where the readings on the rarer side of the jumps
    are under ``POLL_WRAPS`` of them (one delay all but all along), else None, as where
    :func:`_stamp_phase` is None."""
    got = _stamp_phase(t_ns, polls_ns, period_ms)
    if got is None:
        return None
    phase, gap = got
    d = np.diff(phase)
    jumped = np.abs(d) > gap / 2
    if gap > period_ms * 1e6 / 3:  # each jump toggles the delay: the share on the rarer side
        odd = float(np.mean(np.concatenate(([0], np.cumsum(jumped))) % 2))
        return np.zeros(len(t_ns), np.int64) if min(odd, 1.0 - odd) < POLL_WRAPS else None
    jump = np.where(jumped, np.sign(d), 0.0)  # one gap per flip (larger: not a flip's)
    jump[np.abs(d) > 1.5 * gap] = 0.0
    k = np.concatenate(([0], np.cumsum(jump))).astype(np.int64)
    vals, n = np.unique(k, return_counts=True)
    return np.asarray(np.rint((k - vals[np.argmax(n)]) * gap), np.int64)


def _occupied_arc(x_ns: F64, per_ns: float, q: int) -> tuple[float, float]:
    """The shortest arc of a circle of ``per_ns`` holding ``q`` of the points ``x_ns`` (taken
    round it): its start and length."""
    ph = np.sort(np.mod(x_ns, per_ns))
    n = len(ph)
    ext = np.concatenate((ph, ph[: q - 1] + per_ns))
    lengths = ext[q - 1: q - 1 + n] - ext[:n]
    i = int(np.argmin(lengths))
    return float(ph[i]), float(lengths[i])


def poll_grid_delays(t_ns: I64, polls_ns: I64, period_ms: float) -> I64 | None:
    """For locked polls (under ``LOCKED_POLLS``): how much later than the log's median delay
    after its publish each reading was shown (ns; the readings moved back by it sit one
    delay after their publish, which the lag absorbs).

    A locked poll shows each new value less than a poll gap after its publish, and the
    publishes keep their grid, so the stamps' phase on the grid stays inside an arc of about
    a gap (the poll phase's wander, its flips by a gap where it crosses a publish, the stamps'
    millisecond), a short part of the period.  That arc's start is where the publishes sit
    (plus the shortest delay), so each reading's delay is its phase past the start.  The
    period is refined first (``PERIOD_REFINE``: the grid's measured period drifts the phase by
    its error every period, and the arc is shortest at the right one); the arc is the
    shortest one holding ``ARC_SHARE`` of the readings, and a reading outside it counts from
    the nearer end.  None where :func:`_phased_gap` is None or the arc is no short part of
    the period (over ``ARC_MAX`` of it: not one delay)."""
    if _phased_gap(t_ns, polls_ns, period_ms) is None:
        return None
    x = (t_ns - t_ns[0]).astype(np.float64)
    q = max(2, int(np.ceil(ARC_SHARE * len(x))))
    per = period_ms * 1e6
    sub = x[:: max(1, len(x) // REFINE_READINGS)]  # the search on a thinned log
    q_sub = max(2, int(np.ceil(ARC_SHARE * len(sub))))
    span, steps = PERIOD_REFINE
    best = per
    for _ in range(2):  # coarse, then round the coarse best
        cands = best * (1.0 + np.linspace(-span, span, steps))
        best = float(cands[int(np.argmin([_occupied_arc(sub, c, q_sub)[1] for c in cands]))])
        span *= 2.0 / (steps - 1)
    start, length = _occupied_arc(x, best, q)
    if length > ARC_MAX * best:
        return None
    past = np.mod(x - start, best)  # the phase past the arc's start, in [0, period)
    before = past > 0.5 * (length + best)  # nearer the arc's start from below it
    delay = np.where(before, past - best, past)
    return np.asarray(np.rint(delay - np.median(delay)), np.int64)


def publish_spread(polls_ns: I64, t_ns: I64, period_ms: float) -> I64:
    """For readings timestamped at the poll that first showed them: the time since the
    previous poll of the field (the reading was published in between), at most one period
    (the value shown is the latest publish); a reading the first poll showed, a period."""
    i = np.searchsorted(polls_ns, t_ns, side="left")
    prev = polls_ns[np.clip(i - 1, 0, None)]
    gap = np.where(i > 0, t_ns - prev, -1)
    cap = int(period_ms * 1e6) if np.isfinite(period_ms) else int(gap.max(initial=0))
    spread = np.where(gap >= 0, gap, cap)
    return np.asarray(np.clip(spread, 0, max(cap, 0)), np.int64)


def repeated_publishes(t_ns: I64, power_w: F64, spread_ns: I64, polls_ns: I64,
                        period_ms: float) -> tuple[I64, F64, I64]:
    """Readings a change-of-value log hides: a sensor that publishes the same value again (an
    idle board, to the log's 10 mW) leaves polls the importer marks stale, so k periods between
    two changes of value hold k − 1 unseen publishes of the earlier value (and after the last
    change, one per period up to the last poll).  Each is placed evenly between its two
    neighbours, its publish spread likewise; only where the polls in between stay under half a
    period apart (a poll gap could hide a change of value).  After a reading whose publish is
    known only to within half a period or worse (the log's first poll) they are counted back
    from the next reading, each a period before the last, as far as that first poll."""
    if len(t_ns) < 2 or not np.isfinite(period_ms) or period_ms <= 0 or len(polls_ns) < 2:
        return t_ns, power_w, spread_ns
    per = period_ms * 1e6
    big = np.concatenate(([0], np.cumsum(np.diff(polls_ns) > per / 2)))
    at = np.searchsorted(polls_ns, t_ns)
    last = polls_ns[-1]
    ends = np.concatenate((t_ns[1:], [last]))
    end_at = np.concatenate((at[1:], [len(polls_ns) - 1]))
    gap = (ends - t_ns).astype(np.float64)
    k = np.rint(gap / per).astype(np.int64)
    k[-1] = int(np.floor(gap[-1] / per)) + 1  # after the last change: publishes up to the last poll
    dense = big[end_at] == big[at]
    # a reading whose publish is known only to within half a period or worse (the log's first
    # poll: any time in the period before it) cannot count the periods after it: those are
    # counted back from the next reading instead, as far as the first poll (below)
    placed = spread_ns < per / 2
    k = np.where(dense & placed & (k >= 2), k, 1)
    n = k - 1
    src = np.repeat(np.arange(len(t_ns)), n)
    j = np.arange(len(src)) - np.repeat(np.cumsum(n) - n, n) + 1
    tail = src == len(t_ns) - 1
    frac = j / k[src]
    step = np.where(tail, j * per, frac * gap[src])
    s_next = np.concatenate((spread_ns[1:], spread_ns[-1:]))
    s_new = spread_ns[src] + np.where(tail, 0.0, frac * (s_next[src] - spread_ns[src]))
    t_new = t_ns[src] + np.rint(step).astype(np.int64)
    s_new_i = np.rint(s_new).astype(np.int64)
    back = np.flatnonzero(~placed[:-1] & placed[1:] & dense[:-1])
    if len(back):  # publishes of the earlier value surely after the unplaced reading's poll
        m = np.floor((t_ns[back + 1] - spread_ns[back + 1] - t_ns[back]) / per).astype(np.int64)
        m = np.maximum(m, 0)
        b_src = np.repeat(back, m)
        b_j = np.arange(len(b_src)) - np.repeat(np.cumsum(m) - m, m) + 1
        src = np.concatenate((src, b_src))
        t_new = np.concatenate((t_new, t_ns[b_src + 1] - np.rint(b_j * per).astype(np.int64)))
        s_new_i = np.concatenate((s_new_i, spread_ns[b_src + 1]))
    if not len(src):
        return t_ns, power_w, spread_ns
    t_all = np.concatenate((t_ns, t_new))
    order = np.argsort(t_all, kind="stable")
    return (t_all[order], np.concatenate((power_w, power_w[src]))[order],
            np.concatenate((spread_ns, s_new_i))[order])


def poll_stamped(t_ns: I64, power_w: F64, polls_ns: I64, period_ms: float, *,
                 hidden_repeats: bool, sensor_period_ms: float | None = None
                 ) -> tuple[I64, F64, I64, float]:
    """The readings of one field of a poll-stamped log (``t_ns``: the polls that showed a new
    value; ``polls_ns``: all its polls, sorted; ``period_ms``: their median spacing) as the
    engine takes them: the sensor's publish period measured (:func:`publish_period_ms`), the
    readings a repeated value hid restored (``hidden_repeats``: the log marks readings by a
    change of value), each with its publish interval ``[t − spread, t]``, narrowed by the
    publish grid where the neighbours agree.

    A log that polls more slowly than the sensor publishes (``nvidia-smi -l 1`` against a
    100 ms sensor: the readings' spacing over 1.5 × ``sensor_period_ms``, the board's) shows
    a value published within the sensor's period before each poll, not within the poll gap;
    its readings are not consecutive publishes, so neither the hidden repeats nor the grid
    apply.  Returns (t_ns, power_w, spread_ns, period_ms)."""
    if (sensor_period_ms is not None and np.isfinite(period_ms)
            and period_ms > SLOW_POLLS * sensor_period_ms):
        return t_ns, power_w, publish_spread(polls_ns, t_ns, sensor_period_ms), period_ms
    res = stamp_resolution_ns(polls_ns)
    period_ms = publish_period_ms(t_ns, publish_spread(polls_ns, t_ns, float("inf")),
                                  period_ms, res)
    spread = publish_spread(polls_ns, t_ns, period_ms)
    if hidden_repeats:
        t_ns, power_w, spread = repeated_publishes(t_ns, power_w, spread, polls_ns, period_ms)
    t_grid, s_grid, _ = narrow(t_ns, spread, period_ms, res)
    if bool(np.all(np.diff(t_grid) > 0)):
        t_ns, spread = t_grid, s_grid
    return t_ns, power_w, spread, period_ms
