/* The busy/idle split of a device's timeline: items in start order, the gaps of their union
 * with their causes, and each item's share of busy wall time.
 *
 * References: merge_order is np.argsort(start, kind="stable") of sorted runs;
 * union_gaps, issue_ends and gap_causes are the passes of attribution/idle.py's
 * idle_intervals (_union_sorted, the gap arrays, _issue_end_ns's table, the cause rules);
 * share_serial is attribution/engine/activity.py's _share_one_at_a_time.  All but the last
 * are integer arithmetic; share_serial adds the same doubles in the same order.
 */
#include "ppw_native.h"

#include <stdlib.h>

#define MAX_MERGE_RUNS 8

/* merge_order(start_ns, order_out) -> bool
 * If start_ns is at most 8 ascending runs (a device's kernels, then copies, then memsets),
 * order_out gets its stable argsort (ties: the earlier index first) by merging the runs and
 * the call returns True; else False (order_out undefined: the caller sorts). */
PyObject *ppw_merge_order(PyObject *self, PyObject *args)
{
    PyObject *os, *oo;
    ppw_buf bs, bo;
    int ok = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &os, &oo))
        return NULL;
    bs.held = bo.held = 0;
    if (ppw_get(os, &bs, 8, 0, "start_ns") < 0 || ppw_get(oo, &bo, 8, 1, "order_out") < 0)
        goto fail;
    if (bo.n != bs.n) {
        PyErr_SetString(PyExc_ValueError, "merge_order: inconsistent shapes");
        goto fail;
    }
    {
        const int64_t *s = bs.view.buf;
        int64_t *order = bo.view.buf;
        Py_ssize_t n = bs.n, i, r, runs = 1;
        Py_ssize_t cur[MAX_MERGE_RUNS], stop[MAX_MERGE_RUNS];
        Py_BEGIN_ALLOW_THREADS
        cur[0] = 0;
        for (i = 1; i < n && ok; i++) {
            if (s[i] < s[i - 1]) {
                if (runs == MAX_MERGE_RUNS) {
                    ok = 0;
                    break;
                }
                stop[runs - 1] = i;
                cur[runs++] = i;
            }
        }
        stop[runs - 1] = n;
        if (ok) {
            Py_ssize_t k = 0;
            while (k < n) {
                /* the run whose head is next, and how far it stays next */
                Py_ssize_t best = -1, lim_run = -1, j;
                int64_t lim = 0;
                for (r = 0; r < runs; r++) {
                    if (cur[r] < stop[r] && (best < 0 || s[cur[r]] < s[cur[best]]))
                        best = r;
                }
                for (r = 0; r < runs; r++) {
                    if (r != best && cur[r] < stop[r] && (lim_run < 0 || s[cur[r]] < lim)) {
                        lim = s[cur[r]];
                        lim_run = r;
                    }
                }
                for (j = cur[best]; j < stop[best]; j++) {
                    /* on a tie the earlier run (smaller index) goes first */
                    if (lim_run >= 0 && (s[j] > lim || (s[j] == lim && lim_run < best)))
                        break;
                    order[k++] = j;
                }
                cur[best] = j;
            }
        }
        Py_END_ALLOW_THREADS
    }
    ppw_release(&bs);
    ppw_release(&bo);
    return PyBool_FromLong(ok);
fail:
    ppw_release(&bs);
    ppw_release(&bo);
    return NULL;
}

#define MAX_RUNS 3

/* union_gaps(starts, ends, corrs, win0, win1, gap_s, gap_e, next_corr) -> n or -1
 * The items are up to 3 runs (the device's kernels, copies, memsets), each sorted by start,
 * taken in the order a stable argsort of their concatenation gives (merged on the fly: on a
 * tie the earlier run first); every item overlaps the window.  Their union's segments give
 * the gaps: window start -> first segment, between segments, last segment -> window end,
 * with the correlation id of the first item after each gap (of the items starting with it,
 * the largest; -1 after the last), an empty
 * first or last gap dropped.  Outputs need (total items + 1) slots.  -1: a run is not
 * sorted (nothing written that matters; the caller sorts). */
PyObject *ppw_union_gaps(PyObject *self, PyObject *args)
{
    PyObject *oss, *oes, *ocs, *ogs, *oge, *onc, *fs = NULL, *fe = NULL, *fc = NULL;
    long long win0, win1;
    ppw_buf bs[MAX_RUNS], be[MAX_RUNS], bc[MAX_RUNS], bgs, bge, bnc;
    Py_ssize_t runs = 0, r, total = 0, n_out = 0;
    PyObject *result = NULL;
    (void)self;
    bgs.held = bge.held = bnc.held = 0;
    for (r = 0; r < MAX_RUNS; r++)
        bs[r].held = be[r].held = bc[r].held = 0;
    if (!PyArg_ParseTuple(args, "OOOLLOOO", &oss, &oes, &ocs, &win0, &win1, &ogs, &oge, &onc))
        return NULL;
    fs = PySequence_Fast(oss, "starts: a sequence");
    fe = fs ? PySequence_Fast(oes, "ends: a sequence") : NULL;
    fc = fe ? PySequence_Fast(ocs, "corrs: a sequence") : NULL;
    if (fc == NULL)
        goto done;
    runs = PySequence_Fast_GET_SIZE(fs);
    if (runs < 1 || runs > MAX_RUNS || PySequence_Fast_GET_SIZE(fe) != runs
        || PySequence_Fast_GET_SIZE(fc) != runs) {
        PyErr_SetString(PyExc_ValueError, "union_gaps: 1-3 runs of starts, ends, corrs");
        goto done;
    }
    for (r = 0; r < runs; r++) {
        if (ppw_get(PySequence_Fast_GET_ITEM(fs, r), bs + r, 8, 0, "starts[r]") < 0
            || ppw_get(PySequence_Fast_GET_ITEM(fe, r), be + r, 8, 0, "ends[r]") < 0
            || ppw_get(PySequence_Fast_GET_ITEM(fc, r), bc + r, 8, 0, "corrs[r]") < 0)
            goto done;
        if (be[r].n != bs[r].n || bc[r].n != bs[r].n) {
            PyErr_SetString(PyExc_ValueError, "union_gaps: a run's columns differ in length");
            goto done;
        }
        total += bs[r].n;
    }
    if (ppw_get(ogs, &bgs, 8, 1, "gap_s") < 0 || ppw_get(oge, &bge, 8, 1, "gap_e") < 0
        || ppw_get(onc, &bnc, 8, 1, "next_corr") < 0)
        goto done;
    if (bgs.n < total + 1 || bge.n < total + 1 || bnc.n < total + 1) {
        PyErr_SetString(PyExc_ValueError, "union_gaps: outputs need len + 1 slots");
        goto done;
    }
    {
        const int64_t *s[MAX_RUNS], *e[MAX_RUNS], *c[MAX_RUNS];
        Py_ssize_t cur[MAX_RUNS], stop[MAX_RUNS], i, k = 0, a, b;
        int64_t *gs = bgs.view.buf, *ge = bge.view.buf, *nc = bnc.view.buf;
        const int64_t w0 = (int64_t)win0, w1 = (int64_t)win1;
        int sorted = 1, first = 1;
        int64_t run_end = 0;
        for (r = 0; r < runs; r++) {
            s[r] = bs[r].view.buf;
            e[r] = be[r].view.buf;
            c[r] = bc[r].view.buf;
            cur[r] = 0;
            stop[r] = bs[r].n;
        }
        Py_BEGIN_ALLOW_THREADS
        for (r = 0; r < runs && sorted; r++) {
            for (i = 1; i < stop[r]; i++) {
                if (s[r][i] < s[r][i - 1]) {
                    sorted = 0;
                    break;
                }
            }
        }
        if (sorted) {
            gs[0] = w0;
            for (;;) {
                /* the run whose head comes next, and the bound up to which it stays next */
                Py_ssize_t best = -1, lim_run = -1, j;
                int64_t lim = 0;
                const int64_t *sr, *er, *cr;
                for (r = 0; r < runs; r++) {
                    if (cur[r] >= stop[r])
                        continue;
                    if (best < 0 || s[r][cur[r]] < s[best][cur[best]])
                        best = r;
                }
                if (best < 0)
                    break;
                for (r = 0; r < runs; r++) {
                    if (r == best || cur[r] >= stop[r])
                        continue;
                    if (lim_run < 0 || s[r][cur[r]] < lim) {
                        lim = s[r][cur[r]];
                        lim_run = r;
                    }
                }
                sr = s[best];
                er = e[best];
                cr = c[best];
                for (j = cur[best]; j < stop[best]; j++) {
                    int64_t si = sr[j], ei = er[j];
                    if (lim_run >= 0 && (si > lim || (si == lim && lim_run < best)))
                        break;
                    if (ei < si)
                        ei = si;
                    if (first || si > run_end) {
                        if (!first) /* the previous segment ends: a gap starts */
                            gs[k] = run_end;
                        ge[k] = si; /* ... and ends where this segment starts */
                        nc[k] = cr[j];
                        k++;
                        run_end = ei;
                        first = 0;
                    } else {
                        if (ei > run_end)
                            run_end = ei;
                        /* items tied at the segment's start: the latest call's id, so the
                         * cause does not depend on the rows' order */
                        if (si == ge[k - 1] && cr[j] > nc[k - 1])
                            nc[k - 1] = cr[j];
                    }
                }
                cur[best] = j;
            }
            if (!first) {
                gs[k] = run_end;
                /* only the first segment can start before the window, the last end after */
                if (ge[0] < w0)
                    ge[0] = w0;
                if (ge[0] > w1)
                    ge[0] = w1;
                if (gs[k] < w0)
                    gs[k] = w0;
                if (gs[k] > w1)
                    gs[k] = w1;
            }
            gs[0] = w0;
            ge[k] = w1;
            nc[k] = -1;
            a = ge[0] > gs[0] ? 0 : 1;
            b = ge[k] > gs[k] ? k + 1 : k;
            if (a == 1) { /* drop the empty first gap */
                for (i = 1; i < b; i++) {
                    gs[i - 1] = gs[i];
                    ge[i - 1] = ge[i];
                    nc[i - 1] = nc[i];
                }
            }
            n_out = b - a > 0 ? b - a : 0;
        }
        Py_END_ALLOW_THREADS
        if (!sorted)
            n_out = -1;
    }
    result = PyLong_FromSsize_t(n_out);
done:
    for (r = 0; r < MAX_RUNS; r++) {
        ppw_release(bs + r);
        ppw_release(be + r);
        ppw_release(bc + r);
    }
    ppw_release(&bgs);
    ppw_release(&bge);
    ppw_release(&bnc);
    Py_XDECREF(fs);
    Py_XDECREF(fe);
    Py_XDECREF(fc);
    return result;
}

/* issue_ends(api_kind, api_corr, api_end, sync_kind, max_per_row, query, end_out, found_out)
 * -> bool.  The issuing calls are the APIs with kind != sync_kind and corr >= 0.  If their
 * ids are strictly increasing (so each id has one call, as both forms of _issue_end_ns then
 * find), each query id's call end goes to end_out and found_out says whether there was one
 * (end_out is 0 where not), and the call returns True: by one merge walk when the queries
 * do not decrease, else by a table when the ids span at most max_per_row × their count +
 * 1024 values.  Otherwise False: the caller searches.  No issuing call (or no query): every
 * query is not found, True. */
PyObject *ppw_issue_ends(PyObject *self, PyObject *args)
{
    PyObject *ok_, *oc, *oe, *oq, *oend, *ofound;
    int sync_kind;
    long long max_per_row;
    ppw_buf bk, bc, be, bq, bend, bfound;
    int ok = 1, nomem = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOiLOOO", &ok_, &oc, &oe, &sync_kind, &max_per_row, &oq,
                          &oend, &ofound))
        return NULL;
    bk.held = bc.held = be.held = bq.held = bend.held = bfound.held = 0;
    if (ppw_get(ok_, &bk, 1, 0, "api_kind") < 0 || ppw_get(oc, &bc, 8, 0, "api_corr") < 0
        || ppw_get(oe, &be, 8, 0, "api_end") < 0 || ppw_get(oq, &bq, 8, 0, "query") < 0
        || ppw_get(oend, &bend, 8, 1, "end_out") < 0
        || ppw_get(ofound, &bfound, 1, 1, "found_out") < 0)
        goto fail;
    if (bc.n != bk.n || be.n != bk.n || bend.n != bq.n || bfound.n != bq.n) {
        PyErr_SetString(PyExc_ValueError, "issue_ends: inconsistent shapes");
        goto fail;
    }
    {
        const uint8_t *kind = bk.view.buf;
        const int64_t *corr = bc.view.buf, *end = be.view.buf, *q = bq.view.buf;
        int64_t *end_out = bend.view.buf;
        uint8_t *found = bfound.view.buf;
        Py_ssize_t n = bk.n, m = bq.n, i, count = 0;
        int64_t lo = 0, hi = 0, prev = 0;
        int64_t *table = NULL;
        Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n && ok; i++) {
            if (kind[i] == sync_kind || corr[i] < 0)
                continue;
            if (count == 0) {
                lo = hi = corr[i];
            } else {
                if (corr[i] <= prev)
                    ok = 0;
                if (corr[i] > hi)
                    hi = corr[i];
            }
            prev = corr[i];
            count++;
        }
        if (ok && (count == 0 || m == 0)) {
            for (i = 0; i < m; i++) {
                end_out[i] = 0;
                found[i] = 0;
            }
        } else if (ok) {
            /* the queries (the item after each gap) come in increasing ids when the items
             * ran in launch order: one merge walk; else a table over a dense id range */
            int increasing = 1;
            int64_t last_q = -1;
            for (i = 0; i < m; i++) { /* a negative id is never found: it does not count */
                if (q[i] >= 0 && q[i] < last_q) {
                    increasing = 0;
                    break;
                }
                if (q[i] >= 0)
                    last_q = q[i];
            }
            if (increasing) {
                Py_ssize_t p = 0;
                for (i = 0; i < m; i++) {
                    int64_t cq = q[i];
                    if (cq < 0) {
                        end_out[i] = 0;
                        found[i] = 0;
                        continue;
                    }
                    while (p < n && (kind[p] == sync_kind || corr[p] < 0 || corr[p] < cq))
                        p++;
                    if (p < n && corr[p] == cq) {
                        end_out[i] = end[p];
                        found[i] = 1;
                    } else {
                        end_out[i] = 0;
                        found[i] = 0;
                    }
                }
            } else if (hi - lo > max_per_row * (int64_t)count + 1024) {
                ok = 0;
            } else {
                size_t span = (size_t)(hi - lo) + 1;
                uint8_t *have = calloc(span, 1);
                table = malloc(span * sizeof(int64_t));
                if (table == NULL || have == NULL) {
                    nomem = 1;
                } else {
                    for (i = 0; i < n; i++) {
                        if (kind[i] == sync_kind || corr[i] < 0)
                            continue;
                        table[corr[i] - lo] = end[i];
                        have[corr[i] - lo] = 1;
                    }
                    for (i = 0; i < m; i++) {
                        int64_t c = q[i];
                        if (c >= lo && c <= hi && have[c - lo]) {
                            end_out[i] = table[c - lo];
                            found[i] = 1;
                        } else {
                            end_out[i] = 0;
                            found[i] = 0;
                        }
                    }
                }
                free(have);
                free(table);
            }
        }
        Py_END_ALLOW_THREADS
    }
    if (nomem) {
        PyErr_NoMemory();
        goto fail;
    }
    ppw_release(&bk);
    ppw_release(&bc);
    ppw_release(&be);
    ppw_release(&bq);
    ppw_release(&bend);
    ppw_release(&bfound);
    return PyBool_FromLong(ok);
fail:
    ppw_release(&bk);
    ppw_release(&bc);
    ppw_release(&be);
    ppw_release(&bq);
    ppw_release(&bend);
    ppw_release(&bfound);
    return NULL;
}

/* gap_causes(gap_s, gap_e, issue_end, found, sync_s, sync_e, have_api, launch_tol_ns,
 *            stall_ns, sync_cover, cause_out)
 * Gaps sorted and disjoint; sync segments sorted and disjoint.  Causes as idle.py assigns
 * them: sync_wait (0..3 codes: launch_gap 0, sync_wait 1, host_stall 2, other 3) where the
 * sync calls cover more than sync_cover of the gap, else host_stall past stall_ns, else
 * launch_gap where the issuing call ended at or after gap start − tol (with no API records:
 * any gap up to stall_ns), else other. */
PyObject *ppw_gap_causes(PyObject *self, PyObject *args)
{
    PyObject *ogs, *oge, *oie, *ofd, *oss, *ose, *oc;
    int have_api;
    long long tol, stall;
    double cover_frac;
    ppw_buf bgs, bge, bie, bfd, bss, bse, bc;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOpLLdO", &ogs, &oge, &oie, &ofd, &oss, &ose, &have_api,
                          &tol, &stall, &cover_frac, &oc))
        return NULL;
    bgs.held = bge.held = bie.held = bfd.held = bss.held = bse.held = bc.held = 0;
    if (ppw_get(ogs, &bgs, 8, 0, "gap_s") < 0 || ppw_get(oge, &bge, 8, 0, "gap_e") < 0
        || ppw_get(oie, &bie, 8, 0, "issue_end") < 0 || ppw_get(ofd, &bfd, 1, 0, "found") < 0
        || ppw_get(oss, &bss, 8, 0, "sync_s") < 0 || ppw_get(ose, &bse, 8, 0, "sync_e") < 0
        || ppw_get(oc, &bc, 1, 1, "cause_out") < 0)
        goto fail;
    if (bge.n != bgs.n || bie.n != bgs.n || bfd.n != bgs.n || bc.n != bgs.n
        || bse.n != bss.n) {
        PyErr_SetString(PyExc_ValueError, "gap_causes: inconsistent shapes");
        goto fail;
    }
    {
        const int64_t *gs = bgs.view.buf, *ge = bge.view.buf, *ie = bie.view.buf;
        const int64_t *ss = bss.view.buf, *se = bse.view.buf;
        const uint8_t *found = bfd.view.buf;
        uint8_t *cause = bc.view.buf;
        Py_ssize_t n = bgs.n, n_sync = bss.n, i, k = 0;
        Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n; i++) {
            int64_t a = gs[i], b = ge[i], dur = b - a, cover = 0;
            Py_ssize_t m;
            int late;
            uint8_t c;
            while (k < n_sync && se[k] <= a) /* segments ending before this gap */
                k++;
            for (m = k; m < n_sync && ss[m] < b; m++) {
                int64_t lo = ss[m] > a ? ss[m] : a, hi = se[m] < b ? se[m] : b;
                if (hi > lo)
                    cover += hi - lo;
            }
            if (have_api)
                late = found[i] && ie[i] >= a - (int64_t)tol;
            else
                late = dur <= (int64_t)stall;
            c = late ? 0 : 3;
            if (dur > (int64_t)stall)
                c = 2;
            if (cover != 0 && (double)cover > cover_frac * (double)dur)
                c = 1;
            cause[i] = c;
        }
        Py_END_ALLOW_THREADS
    }
    ppw_release(&bgs);
    ppw_release(&bge);
    ppw_release(&bie);
    ppw_release(&bfd);
    ppw_release(&bss);
    ppw_release(&bse);
    ppw_release(&bc);
    Py_RETURN_NONE;
fail:
    ppw_release(&bgs);
    ppw_release(&bge);
    ppw_release(&bie);
    ppw_release(&bfd);
    ppw_release(&bss);
    ppw_release(&bse);
    ppw_release(&bc);
    return NULL;
}

/* share_serial(start_ns, end_ns, order, origin_ns, out) -> bool
 * _share_one_at_a_time: with the items in `order` (by start), if the times s0 e0 s1 e1 ...
 * (minus origin) never step back, G is the running sum of the busy segments (the idle ones
 * add 0.0) and item i's share is max(G after its end − G at its start, 0): written to
 * out[order[k]], True.  Otherwise False (out undefined): the items overlap. */
PyObject *ppw_share_serial(PyObject *self, PyObject *args)
{
    PyObject *os, *oe, *oo, *oout;
    long long origin;
    ppw_buf bs, be, bo, bout;
    int ok = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOLO", &os, &oe, &oo, &origin, &oout))
        return NULL;
    bs.held = be.held = bo.held = bout.held = 0;
    if (ppw_get(os, &bs, 8, 0, "start_ns") < 0 || ppw_get(oe, &be, 8, 0, "end_ns") < 0
        || ppw_get(oo, &bo, 8, 0, "order") < 0 || ppw_get(oout, &bout, 8, 1, "out") < 0)
        goto fail;
    if (be.n != bs.n || bo.n != bs.n || bout.n != bs.n) {
        PyErr_SetString(PyExc_ValueError, "share_serial: inconsistent shapes");
        goto fail;
    }
    {
        const int64_t *s = bs.view.buf, *e = be.view.buf, *order = bo.view.buf;
        double *out = bout.view.buf;
        Py_ssize_t n = bs.n, k;
        const int64_t o = (int64_t)origin;
        int64_t prev = 0;
        double g = 0.0;
        Py_BEGIN_ALLOW_THREADS
        for (k = 0; k < n; k++) {
            int64_t i = order[k];
            if (i < 0 || i >= n || (k > 0 && s[i] - o < prev) || e[i] < s[i]) {
                ok = 0;
                break;
            }
            prev = e[i] - o;
        }
        if (ok) {
            for (k = 0; k < n; k++) {
                int64_t i = order[k];
                double ts = (double)(s[i] - o) * 1e-9, te = (double)(e[i] - o) * 1e-9;
                double g_end = g + (te - ts), d;
                if (k + 1 < n) /* the idle segment to the next start adds 0.0 */
                    g_end = g_end + 0.0;
                d = g_end - g;
                out[i] = d > 0.0 ? d : 0.0;
                g = g_end;
            }
        }
        Py_END_ALLOW_THREADS
    }
    ppw_release(&bs);
    ppw_release(&be);
    ppw_release(&bo);
    ppw_release(&bout);
    return PyBool_FromLong(ok);
fail:
    ppw_release(&bs);
    ppw_release(&be);
    ppw_release(&bo);
    ppw_release(&bout);
    return NULL;
}
