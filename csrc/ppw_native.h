/* ppwtop's compiled sweeps: shared declarations.
 *
 * Every function here has a numpy reference in the Python module that owns the pass (named
 * in its docstring in attribution/native.py) and gives the same bits; tests/test_native.py
 * checks each against its reference.  Arrays arrive through the buffer protocol, already of
 * the right dtype and C-contiguous (attribution/native.py sees to that); the functions check
 * item sizes and lengths and raise ValueError on a mismatch rather than read out of bounds.
 */
#ifndef PPW_NATIVE_H
#define PPW_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A borrowed C view of a 1-D buffer of `itemsize`-byte items (writable if asked). */
typedef struct {
    Py_buffer view;
    Py_ssize_t n;
    int held;
} ppw_buf;

int ppw_get(PyObject *obj, ppw_buf *b, Py_ssize_t itemsize, int writable, const char *name);
void ppw_release(ppw_buf *b);

PyObject *ppw_interp_groups(PyObject *self, PyObject *args);
PyObject *ppw_knots_grouped(PyObject *self, PyObject *args);
PyObject *ppw_window_block(PyObject *self, PyObject *args);
PyObject *ppw_merge_order(PyObject *self, PyObject *args);
PyObject *ppw_union_gaps(PyObject *self, PyObject *args);
PyObject *ppw_issue_ends(PyObject *self, PyObject *args);
PyObject *ppw_gap_causes(PyObject *self, PyObject *args);
PyObject *ppw_share_serial(PyObject *self, PyObject *args);
PyObject *ppw_first_order(PyObject *self, PyObject *args);

#endif
