/* The simulator's first-order recursion, y[n] = b0*x[n] + a*y[n-1] with y[-1] = 0.
 *
 * Reference: scipy.signal.lfilter([b0], [1, -a], x), whose transposed direct form II does,
 * per sample, y = z + b0*x and z = b1*x - a1*y with b1 = 0 and a1 = -a; the loop below does
 * the same operations in the same order, so the bits agree, signed zeros and non-finite
 * inputs included (tests/test_native.py).  Called through attribution/sim/first_order.py.
 */
#include "ppw_native.h"

PyObject *ppw_first_order(PyObject *self, PyObject *args)
{
    double b0, a;
    PyObject *x_obj, *out_obj;
    ppw_buf x, out;
    (void)self;
    if (!PyArg_ParseTuple(args, "ddOO", &b0, &a, &x_obj, &out_obj))
        return NULL;
    if (ppw_get(x_obj, &x, 8, 0, "x") < 0)
        return NULL;
    if (ppw_get(out_obj, &out, 8, 1, "out") < 0) {
        ppw_release(&x);
        return NULL;
    }
    if (out.n != x.n) {
        PyErr_SetString(PyExc_ValueError, "first_order: out and x differ in length");
        ppw_release(&x);
        ppw_release(&out);
        return NULL;
    }
    {
        const double *xs = (const double *)x.view.buf;
        double *ys = (double *)out.view.buf;
        const double b1 = 0.0, a1 = -a;
        double z = 0.0;
        Py_ssize_t i, n = x.n;
        Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n; i++) {
            double y = z + b0 * xs[i];
            ys[i] = y;
            z = b1 * xs[i] - a1 * y;
        }
        Py_END_ALLOW_THREADS
    }
    ppw_release(&x);
    ppw_release(&out);
    Py_RETURN_NONE;
}
