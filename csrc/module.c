/* attribution._native: the module table and the buffer helpers shared by the sweeps. */
#include "ppw_native.h"

int ppw_get(PyObject *obj, ppw_buf *b, Py_ssize_t itemsize, int writable, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    b->held = 0;
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0)
        return -1;
    b->held = 1;
    if (b->view.itemsize != itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected a C-contiguous buffer of %zd-byte items", name,
                     itemsize);
        ppw_release(b);
        return -1;
    }
    b->n = b->view.len / itemsize;
    return 0;
}

void ppw_release(ppw_buf *b)
{
    if (b->held) {
        PyBuffer_Release(&b->view);
        b->held = 0;
    }
}

static PyMethodDef methods[] = {
    {"interp_groups", ppw_interp_groups, METH_VARARGS,
     "interp_groups(xs, ys, xcs, t_ns, origin_ns, out, n_rows, n_cols)"},
    {"knots_grouped", ppw_knots_grouped, METH_VARARGS,
     "knots_grouped(start_ns, end_ns, group, n_groups, origin_ns, x_out, b_out, off_out, len_out)"},
    {"window_block", ppw_window_block, METH_VARARGS,
     "window_block(xs, ys, xcs, t_ns, cols_ns, hi, lo, w_s, origin_ns, out)"},
    {"merge_order", ppw_merge_order, METH_VARARGS,
     "merge_order(start_ns, order_out) -> bool"},
    {"union_gaps", ppw_union_gaps, METH_VARARGS,
     "union_gaps(start_ns, end_ns, corr, order, win0, win1, gap_s, gap_e, next_corr) -> n"},
    {"issue_ends", ppw_issue_ends, METH_VARARGS,
     "issue_ends(api_kind, api_corr, api_end, sync_kind, max_per_row, query, end_out, "
     "found_out) -> bool"},
    {"gap_causes", ppw_gap_causes, METH_VARARGS,
     "gap_causes(gap_s, gap_e, issue_end, found, sync_s, sync_e, have_api, launch_tol_ns, "
     "stall_ns, sync_cover, cause_out)"},
    {"share_serial", ppw_share_serial, METH_VARARGS,
     "share_serial(start_ns, end_ns, order, origin_ns, out) -> bool"},
    {"first_order", ppw_first_order, METH_VARARGS, "first_order(b0, a, x, out)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "ppwtop's compiled sweeps (see attribution/native.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    return PyModule_Create(&module);
}
