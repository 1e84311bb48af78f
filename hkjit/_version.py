"""hkjit's version, in a leaf module so that any layer can read it without importing the package."""

__version__ = "0.1.0"
