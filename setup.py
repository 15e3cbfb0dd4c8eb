"""The one compiled part of mlxcel; everything else is declared in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[
    # a sampler chain's candidate set in C (mlxcel/engine/narrowing.py): one call a token
    # instead of a dozen numpy ones, which cost ~0.2 ms on the caches a decode leaves
    Extension("mlxcel.engine._topset", ["mlxcel/engine/_topset.c"], extra_compile_args=["-O3", "-Wall"]),
])
