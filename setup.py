"""Package layout only; all metadata lives in pyproject.toml.

The design card puts flows/, tasks/ and metrics/ at the repository's top level.
They are installed as subpackages of ``judgeflow`` so they never shadow other
top-level names (``tasks`` and ``metrics`` are common ones).
"""

from setuptools import find_packages, setup

ROOTS = {
    "judgeflow": "judgeflow",
    "judgeflow.metrics": "metrics",
    "judgeflow.tasks": "tasks",
    "judgeflow.flows": "flows",
}

packages = []
for name, directory in ROOTS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(directory)]

setup(packages=packages, package_dir=ROOTS)
