# The Python package's tests (bindings/python; unittest, run by make check):
# SKIP only where configure found no Python 3 with NumPy.
EXTRA_DIST += tests/python/run.sh tests/python/test_umpool.py
TESTS += tests/python/run.sh
