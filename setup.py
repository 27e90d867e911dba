"""Only the compiled record walker needs setup.py; everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "protocol._recwalk",
            sources=["protocol/_recwalk.c"],
            extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"],
        )
    ]
)
