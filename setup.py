"""The optional C accelerator gputape._native (everything else is in pyproject.toml).

``optional=True``: where no C compiler or Python headers are found, the build of the
extension fails with a warning and the pure-Python package installs and runs as before.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("gputape._native", ["gputape/_native.c"], optional=True)])
