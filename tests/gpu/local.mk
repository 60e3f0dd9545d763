# GPU tests (owned by tests/gpu/): included from the top Makefile.am.
