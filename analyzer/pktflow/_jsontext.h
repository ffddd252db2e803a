/* _jsontext.c's entry point, listed in _speedups.c's method table. */
#ifndef PKTFLOW_JSONTEXT_H
#define PKTFLOW_JSONTEXT_H
#include <Python.h>

PyObject *jsontext_dumps(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
