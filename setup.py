"""The package list, found from the tree so that it cannot drift from it.

The import names are namespaced: core/ is ``memlens``, tui/ is ``memlens.tui`` and
data/ is ``memlens.data``. Every folder under them that holds an ``__init__.py`` is
a package of the wheel (tests/test_packaging.py checks the folders and the data
files the code loads; the rest of the metadata is in pyproject.toml).
"""

from pathlib import Path

from setuptools import setup

ROOTS = {"memlens": "core", "memlens.tui": "tui", "memlens.data": "data"}


def packages() -> list[str]:
    here = Path(__file__).resolve().parent
    found = []
    for name, folder in ROOTS.items():
        for init in sorted((here / folder).rglob("__init__.py")):
            found.append(".".join((name, *init.parent.relative_to(here / folder).parts)))
    return found


setup(packages=packages(), package_dir=ROOTS)
