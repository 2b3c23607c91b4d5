/* Busy-time functions: the knots of B_g(t) and B_g read at many times.
 *
 * References (attribution/engine/activity.py): knots_grouped is BusyFunction's per-group
 * `_knots` on its one-instance-after-another path (groups that are not are left to numpy),
 * interp_block is `np.interp(t, x, y, left, right)` written into a strided block.
 */
#include "ppw_native.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* numpy's binary_search_with_guess contract: -1 if key < x[0], len if key > x[len-1], else
 * the j with x[j] <= key < x[j+1] (len-1 when key == x[len-1]).  Found by galloping from the
 * previous answer, so nearby keys cost a few comparisons instead of a full bisection. */
static Py_ssize_t locate(const double *x, Py_ssize_t len, double key, Py_ssize_t j)
{
    Py_ssize_t lo, hi, step;
    if (key > x[len - 1])
        return len;
    if (key < x[0])
        return -1;
    if (j < 0)
        j = 0;
    if (j > len - 1)
        j = len - 1;
    if (x[j] <= key) {
        lo = j;
        step = 1;
        while (lo + step < len && x[lo + step] <= key) {
            lo += step;
            step <<= 1;
        }
        hi = lo + step < len ? lo + step : len - 1;
    } else {
        hi = j;
        step = 1;
        while (hi - step >= 0 && x[hi - step] > key) {
            hi -= step;
            step <<= 1;
        }
        lo = hi - step >= 0 ? hi - step : 0;
    }
    /* x[lo] <= key, and x[hi] > key unless hi == len - 1 */
    while (hi - lo > 1) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (x[mid] <= key)
            lo = mid;
        else
            hi = mid;
    }
    return x[hi] <= key ? hi : lo;
}

#define COARSE_SHIFT 3
/* locate() with a coarse index xc[c] = x[c << COARSE_SHIFT] (nc entries, small enough to
 * stay in cache): a query next to the previous answer is two comparisons; a jump searches
 * the coarse index and then one cache line of x, instead of galloping through x itself
 * (each of whose probes would be a cache miss on the millions of knots of a long trace). */
static Py_ssize_t locate2(const double *x, Py_ssize_t len, const double *xc, Py_ssize_t nc,
                          double key, Py_ssize_t j)
{
    Py_ssize_t c, lo, hi;
    if (key > x[len - 1])
        return len;
    if (key < x[0])
        return -1;
    if (j < 0)
        j = 0;
    if (j > len - 1)
        j = len - 1;
    if (x[j] <= key) {
        if (j + 1 >= len || x[j + 1] > key)
            return j;
        if (j + 2 >= len || x[j + 2] > key)
            return j + 1;
    }
    c = locate(xc, nc, key, j >> COARSE_SHIFT);
    if (c > nc - 1)
        c = nc - 1;
    lo = c << COARSE_SHIFT;
    hi = lo + ((Py_ssize_t)1 << COARSE_SHIFT);
    if (hi > len - 1)
        hi = len - 1;
    /* x[lo] <= key, and x[hi] > key unless hi == len - 1 */
    while (hi - lo > 1) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (x[mid] <= key)
            lo = mid;
        else
            hi = mid;
    }
    return x[hi] <= key ? hi : lo;
}

typedef struct {
    const double *x, *y, *xc;
    Py_ssize_t len, nc, j;
    double right;
} ppw_group;

/* gallop forward in x from j (x[j] <= key < x[len-1] known) */
static Py_ssize_t gallop_fwd(const double *x, Py_ssize_t len, double key, Py_ssize_t j)
{
    Py_ssize_t lo = j, step = 1, hi;
    while (lo + step < len && x[lo + step] <= key) {
        lo += step;
        step <<= 1;
    }
    hi = lo + step < len ? lo + step : len - 1;
    while (hi - lo > 1) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (x[mid] <= key)
            lo = mid;
        else
            hi = mid;
    }
    return x[hi] <= key ? hi : lo;
}

/* One row of queries (keys, mostly ascending) for one group, written to dst[c * step]:
 * np.interp's values (left 0, right p->right).  The search resumes from the group's last
 * answer: a query in the same or the next two segments costs a comparison or three, a
 * nearby one a gallop, a far one the coarse index.  The segment's slope is reused while
 * queries stay in it (the same expression, so the same bits). */
static void interp_row(ppw_group *p, const double *keys, Py_ssize_t n_cols, double *dst,
                       Py_ssize_t step)
{
    const double *x = p->x, *y = p->y;
    Py_ssize_t len = p->len, j = p->j, js = -1, c;
    double slope = 0.0;
    if (len < 2) { /* no knots: 0; one knot: numpy's one-point rule */
        for (c = 0; c < n_cols; c++) {
            double key = keys[c];
            dst[c * step] = len == 0 ? 0.0 : key < x[0] ? 0.0 : key > x[0] ? p->right : y[0];
        }
        return;
    }
    {
        const double x0 = x[0], xl = x[len - 1], yl = y[len - 1], right = p->right;
        if (j < 0)
            j = 0;
        if (j > len - 2)
            j = len - 2;
        for (c = 0; c < n_cols; c++) {
            double key = keys[c], v;
            if (!(key >= x0)) { /* before the first knot (or NaN, which numpy passes on) */
                dst[c * step] = key != key ? key : 0.0;
                continue;
            }
            if (key >= xl) {
                dst[c * step] = key > xl ? right : yl;
                continue;
            }
            /* x0 <= key < xl: the j in [0, len - 2] with x[j] <= key < x[j + 1] */
            if (key < x[j]) {
                j = locate2(x, len, p->xc, p->nc, key, j);
            } else if (!(key < x[j + 1])) {
                j++;
                if (!(key < x[j + 1])) {
                    j++;
                    if (!(key < x[j + 1])) {
                        Py_ssize_t far = j + 64 < len ? j + 64 : len - 1;
                        j = x[far] <= key ? locate2(x, len, p->xc, p->nc, key, j)
                                          : gallop_fwd(x, len, key, j);
                    }
                }
            }
            if (x[j] == key) {
                v = y[j];
            } else {
                if (js != j) {
                    slope = (y[j + 1] - y[j]) / (x[j + 1] - x[j]);
                    js = j;
                }
                v = slope * (key - x[j]) + y[j];
                if (isnan(v)) {
                    v = slope * (key - x[j + 1]) + y[j + 1];
                    if (isnan(v) && y[j] == y[j + 1])
                        v = y[j];
                }
            }
            dst[c * step] = v;
        }
        p->j = j;
    }
}

/* The groups of (xs, ys, xcs) -- each group's knots, B there and coarse index -- borrowed
 * for one call.  take_groups fills every field or sets an exception and returns -1; either
 * way drop_groups gives back what was taken (ppw_release skips buffers never taken). */
typedef struct {
    PyObject *fx, *fy, *fxc;
    ppw_buf *bufs; /* 3 per group */
    ppw_group *grp;
    Py_ssize_t n;
} ppw_groups;

static int take_groups(PyObject *oxs, PyObject *oys, PyObject *oxcs, const char *who,
                       ppw_groups *G)
{
    Py_ssize_t g;
    memset(G, 0, sizeof(*G));
    G->fx = PySequence_Fast(oxs, "xs: a sequence");
    G->fy = G->fx ? PySequence_Fast(oys, "ys: a sequence") : NULL;
    G->fxc = G->fy ? PySequence_Fast(oxcs, "xcs: a sequence") : NULL;
    if (G->fxc == NULL)
        return -1;
    G->n = PySequence_Fast_GET_SIZE(G->fx);
    if (PySequence_Fast_GET_SIZE(G->fy) != G->n || PySequence_Fast_GET_SIZE(G->fxc) != G->n
        || G->n < 1) {
        PyErr_Format(PyExc_ValueError, "%s: xs, ys, xcs differ in length", who);
        return -1;
    }
    G->bufs = calloc((size_t)(3 * G->n), sizeof(ppw_buf));
    G->grp = calloc((size_t)G->n, sizeof(ppw_group));
    if (G->bufs == NULL || G->grp == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (g = 0; g < G->n; g++) {
        ppw_buf *b = G->bufs + 3 * g;
        ppw_group *p = G->grp + g;
        if (ppw_get(PySequence_Fast_GET_ITEM(G->fx, g), b, 8, 0, "xs[g]") < 0
            || ppw_get(PySequence_Fast_GET_ITEM(G->fy, g), b + 1, 8, 0, "ys[g]") < 0
            || ppw_get(PySequence_Fast_GET_ITEM(G->fxc, g), b + 2, 8, 0, "xcs[g]") < 0)
            return -1;
        if (b[1].n != b[0].n || b[2].n != (b[0].n > 0 ? ((b[0].n - 1) >> COARSE_SHIFT) + 1 : 0)) {
            PyErr_Format(PyExc_ValueError, "%s: a group's x, y, xc disagree", who);
            return -1;
        }
        p->x = b[0].view.buf;
        p->y = b[1].view.buf;
        p->xc = b[2].view.buf;
        p->len = b[0].n;
        p->nc = b[2].n;
        p->j = 0;
        p->right = b[0].n > 0 ? p->y[b[0].n - 1] : 0.0;
    }
    return 0;
}

static void drop_groups(ppw_groups *G)
{
    Py_ssize_t g;
    if (G->bufs != NULL) {
        for (g = 0; g < 3 * G->n; g++)
            ppw_release(G->bufs + g);
    }
    free(G->bufs);
    free(G->grp);
    Py_XDECREF(G->fx);
    Py_XDECREF(G->fy);
    Py_XDECREF(G->fxc);
    memset(G, 0, sizeof(*G));
}

/* interp_groups(xs, ys, xcs, t_ns, origin_ns, out, n_rows, n_cols)
 * For every group g (xs[g], ys[g]: its knots and B there; xcs[g]: x[g][::8]; an empty group
 * reads 0), query q = r * n_cols + c at time (t_ns[q] - origin_ns) * 1e-9 s goes to
 * out[(c * n_rows + r) * n_groups + g]: np.interp(t, x, y, left=0, right=y[-1]). */
PyObject *ppw_interp_groups(PyObject *self, PyObject *args)
{
    PyObject *oxs, *oys, *oxcs, *ot, *oout;
    long long origin;
    Py_ssize_t n_rows, n_cols, n_groups;
    ppw_buf bt, bo;
    ppw_groups G;
    PyObject *result = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOLOnn", &oxs, &oys, &oxcs, &ot, &origin, &oout, &n_rows,
                          &n_cols))
        return NULL;
    bt.held = bo.held = 0;
    if (take_groups(oxs, oys, oxcs, "interp_groups", &G) < 0)
        goto done;
    n_groups = G.n;
    if (ppw_get(ot, &bt, 8, 0, "t_ns") < 0 || ppw_get(oout, &bo, 8, 1, "out") < 0)
        goto done;
    if (n_rows < 0 || n_cols < 0 || n_rows * n_cols != bt.n || bo.n != bt.n * n_groups) {
        PyErr_SetString(PyExc_ValueError, "interp_groups: inconsistent shapes");
        goto done;
    }
    {
        const int64_t *t = bt.view.buf;
        double *out = bo.view.buf;
        double *keys;
        Py_ssize_t r, c, g;
        Py_BEGIN_ALLOW_THREADS
        keys = malloc(sizeof(double) * (size_t)(n_cols > 0 ? n_cols : 1));
        if (keys != NULL) {
            for (r = 0; r < n_rows; r++) {
                const int64_t *tr = t + r * n_cols;
                for (c = 0; c < n_cols; c++)
                    keys[c] = (double)(tr[c] - (int64_t)origin) * 1e-9;
                for (g = 0; g < n_groups; g++)
                    interp_row(G.grp + g, keys, n_cols, out + r * n_groups + g, n_rows * n_groups);
            }
        }
        Py_END_ALLOW_THREADS
        if (keys == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        free(keys);
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    drop_groups(&G);
    ppw_release(&bt);
    ppw_release(&bo);
    return result;
}

/* window_block(xs, ys, xcs, t_ns, cols_ns, hi, lo, w_s, origin_ns, out)
 * The lag search's window fractions without the table of edge values: for reading r the
 * busy functions are read at t_ns[r] - cols_ns[c] (cols_ns descending, so the times ascend)
 * into a row buffer, and out[k, r, g] = (B_g at edge hi[k] - B_g at edge lo[k]) / w_s,
 * out shaped (len(hi), len(t_ns), groups): the same values as timebase's table form. */
PyObject *ppw_window_block(PyObject *self, PyObject *args)
{
    PyObject *oxs, *oys, *oxcs, *ot, *ocols, *ohi, *olo, *oout;
    PyObject *result = NULL;
    double w_s;
    long long origin;
    Py_ssize_t n_groups = 0, g;
    ppw_buf bt, bcols, bhi, blo, bo;
    ppw_groups G;
    double *keys = NULL, *row = NULL;
    (void)self;
    bt.held = bcols.held = bhi.held = blo.held = bo.held = 0;
    memset(&G, 0, sizeof(G));
    if (!PyArg_ParseTuple(args, "OOOOOOOdLO", &oxs, &oys, &oxcs, &ot, &ocols, &ohi, &olo,
                          &w_s, &origin, &oout))
        return NULL;
    if (take_groups(oxs, oys, oxcs, "window_block", &G) < 0)
        goto done;
    n_groups = G.n;
    if (ppw_get(ot, &bt, 8, 0, "t_ns") < 0 || ppw_get(ocols, &bcols, 8, 0, "cols_ns") < 0
        || ppw_get(ohi, &bhi, 8, 0, "hi") < 0 || ppw_get(olo, &blo, 8, 0, "lo") < 0
        || ppw_get(oout, &bo, 8, 1, "out") < 0)
        goto done;
    if (blo.n != bhi.n || bo.n != bhi.n * bt.n * n_groups) {
        PyErr_SetString(PyExc_ValueError, "window_block: inconsistent shapes");
        goto done;
    }
    {
        const int64_t *hi = bhi.view.buf, *lo = blo.view.buf;
        Py_ssize_t k;
        for (k = 0; k < bhi.n; k++) {
            if (hi[k] < 0 || hi[k] >= bcols.n || lo[k] < 0 || lo[k] >= bcols.n) {
                PyErr_SetString(PyExc_ValueError, "window_block: an edge index out of range");
                goto done;
            }
        }
    }
    keys = malloc(sizeof(double) * (size_t)(bcols.n + 1));
    row = malloc(sizeof(double) * (size_t)(bcols.n * n_groups + 1));
    if (keys == NULL || row == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    {
        const int64_t *t = bt.view.buf, *cols = bcols.view.buf;
        const int64_t *hi = bhi.view.buf, *lo = blo.view.buf;
        double *out = bo.view.buf;
        Py_ssize_t n = bt.n, n_cols = bcols.n, n_k = bhi.n, r, c, k;
        Py_BEGIN_ALLOW_THREADS
        for (r = 0; r < n; r++) {
            for (c = 0; c < n_cols; c++)
                keys[c] = (double)((t[r] - cols[c]) - (int64_t)origin) * 1e-9;
            for (g = 0; g < n_groups; g++)
                interp_row(G.grp + g, keys, n_cols, row + g, n_groups);
            for (k = 0; k < n_k; k++) {
                const double *a = row + hi[k] * n_groups, *b = row + lo[k] * n_groups;
                double *dst = out + (k * n + r) * n_groups;
                for (g = 0; g < n_groups; g++)
                    dst[g] = (a[g] - b[g]) / w_s;
            }
        }
        Py_END_ALLOW_THREADS
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    drop_groups(&G);
    free(keys);
    free(row);
    ppw_release(&bt);
    ppw_release(&bcols);
    ppw_release(&bhi);
    ppw_release(&blo);
    ppw_release(&bo);
    return result;
}

/* knots_grouped(start_ns, end_ns, group, n_groups, origin_ns, x_out, b_out, off_out, len_out)
 * Items in row order, split by group (stable).  For group g the interleaved times
 * s0 e0 s1 e1 ... (seconds since origin) go to x_out[off_out[g]:], off_out[g] = 2 × the items
 * of the groups before g; if they never step back, B at them is their running sum of
 * (e_i - s_i) and the distinct knots (a time kept where the next one is later, and the last)
 * are written there with B in b_out, len_out[g] their count; otherwise len_out[g] = -1 and
 * the caller sorts that group's events itself. */
PyObject *ppw_knots_grouped(PyObject *self, PyObject *args)
{
    PyObject *os, *oe, *og, *ox, *ob, *ooff, *olen;
    long long origin;
    Py_ssize_t n_groups;
    ppw_buf bs, be, bg, bx, bb, boff, blen;
    Py_ssize_t *cursor = NULL;
    double *sums = NULL, *last_t = NULL;
    int bad_group = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOnLOOOO", &os, &oe, &og, &n_groups, &origin, &ox, &ob,
                          &ooff, &olen))
        return NULL;
    bs.held = be.held = bg.held = bx.held = bb.held = boff.held = blen.held = 0;
    if (ppw_get(os, &bs, 8, 0, "start_ns") < 0 || ppw_get(oe, &be, 8, 0, "end_ns") < 0
        || ppw_get(og, &bg, 4, 0, "group") < 0 || ppw_get(ox, &bx, 8, 1, "x_out") < 0
        || ppw_get(ob, &bb, 8, 1, "b_out") < 0 || ppw_get(ooff, &boff, 8, 1, "off_out") < 0
        || ppw_get(olen, &blen, 8, 1, "len_out") < 0)
        goto fail;
    if (be.n != bs.n || bg.n != bs.n || bx.n < 2 * bs.n || bb.n < 2 * bs.n || n_groups < 0
        || boff.n < n_groups + 1 || blen.n < n_groups) {
        PyErr_SetString(PyExc_ValueError, "knots_grouped: inconsistent shapes");
        goto fail;
    }
    cursor = calloc((size_t)n_groups + 1, sizeof(Py_ssize_t));
    sums = calloc((size_t)n_groups + 1, sizeof(double));
    last_t = calloc((size_t)n_groups + 1, sizeof(double));
    if (cursor == NULL || sums == NULL || last_t == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    {
        const int64_t *s = bs.view.buf, *e = be.view.buf;
        const int32_t *grp = bg.view.buf;
        double *xo = bx.view.buf, *bo = bb.view.buf;
        int64_t *off = boff.view.buf, *lens = blen.view.buf;
        Py_ssize_t n = bs.n, i, g;
        const int64_t o = (int64_t)origin;
        Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n; i++) {
            if (grp[i] < 0 || grp[i] >= n_groups) {
                bad_group = 1;
                break;
            }
            cursor[grp[i]]++;
        }
        if (!bad_group) {
            off[0] = 0;
            for (g = 0; g < n_groups; g++) {
                off[g + 1] = off[g] + 2 * (int64_t)cursor[g];
                cursor[g] = (Py_ssize_t)off[g];
            }
            /* one pass: each group's knots written as they come, checked, summed and
             * de-duplicated on the way (equal times carry equal B: the sum adds 0.0) */
            for (g = 0; g < n_groups; g++)
                lens[g] = 0;
            for (i = 0; i < n; i++) {
                int32_t gi = grp[i];
                double ts = (double)(s[i] - o) * 1e-9, te = (double)(e[i] - o) * 1e-9;
                double *xg, *bgp, acc;
                Py_ssize_t w;
                if (lens[gi] < 0)
                    continue;
                xg = xo + off[gi];
                bgp = bo + off[gi];
                w = (Py_ssize_t)lens[gi];
                if (w > 0 && !(ts - last_t[gi] >= 0.0)) { /* steps back: not one at a time */
                    lens[gi] = -1;
                    continue;
                }
                if (!(te - ts >= 0.0)) {
                    lens[gi] = -1;
                    continue;
                }
                acc = sums[gi];
                if (w == 0 || ts != xg[w - 1]) {
                    xg[w] = ts;
                    bgp[w] = acc;
                    w++;
                }
                acc += te - ts;
                if (te != xg[w - 1]) {
                    xg[w] = te;
                    bgp[w] = acc;
                    w++;
                }
                sums[gi] = acc + 0.0; /* the idle term to the next start */
                last_t[gi] = te;
                lens[gi] = w;
            }
        }
        Py_END_ALLOW_THREADS
    }
    free(cursor);
    free(sums);
    free(last_t);
    cursor = NULL;
    sums = last_t = NULL;
    if (bad_group) {
        PyErr_SetString(PyExc_ValueError, "knots_grouped: a group outside [0, n_groups)");
        goto fail;
    }
    ppw_release(&bs);
    ppw_release(&be);
    ppw_release(&bg);
    ppw_release(&bx);
    ppw_release(&bb);
    ppw_release(&boff);
    ppw_release(&blen);
    Py_RETURN_NONE;
fail:
    ppw_release(&bs);
    ppw_release(&be);
    ppw_release(&bg);
    ppw_release(&bx);
    ppw_release(&bb);
    ppw_release(&boff);
    ppw_release(&blen);
    free(cursor);
    free(sums);
    free(last_t);
    return NULL;
}
