"""The base of hkjit's small value classes (DType, Target, Specialization, Plan, Array, ...).

`@dataclass` writes each class's methods as source and compiles it while the module is imported:
0.3-1 ms a class, and the modules a warm start imports held ten of them, a third of their import
time. These classes get the same behaviour from methods written once here: equality and hashing
over `_compare` (default: every field), a repr listing the fields, and for `Frozen` classes no
assignment after __init__. Each class lists its fields in `__slots__` and writes its own __init__.
"""

from __future__ import annotations


class Value:
    __slots__ = ()
    _compare: tuple | None = None      # the fields equality and hashing look at (None: all of __slots__)

    def _key(self) -> tuple:
        return tuple(getattr(self, f) for f in (self._compare or self.__slots__))

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __repr__(self):
        return f"{type(self).__qualname__}({', '.join(f'{f}={getattr(self, f)!r}' for f in self.__slots__)})"


class Mutable(Value):
    """A value whose fields may be assigned; unhashable, as a mutable dataclass is."""
    __slots__ = ()
    __hash__ = None


class Frozen(Value):
    """A value that cannot change once made (hashable: a dict key). __init__ sets fields with `_set`."""
    __slots__ = ()

    def __hash__(self):
        return hash(self._key())

    def _set(self, **fields):
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__qualname__} is immutable")

    def __delattr__(self, name):
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__qualname__} is immutable")
