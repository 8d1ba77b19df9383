"""Builds the cffi extension dptrain._dptrain_cffi against an installed libdptrain (pkg-config
dptrain, or DPTRAIN_INCLUDE_DIR and DPTRAIN_LIBRARY_DIR); metadata is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["dptrain/_build.py:ffi"])
