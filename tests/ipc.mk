# tests/ipc.mk - build rules for this part (see top-level Makefile.am).
