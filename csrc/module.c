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
