"""Op definitions: one module per op. Each registers an object with
`specialize(target, **params) -> (Specialization, plan)` used by `hkjit.build` and the op's
public function."""

from ..errors import InvalidArgumentError

OPS: dict = {}


def register(op):
    OPS[op.name] = op
    return op


def get(name: str):
    if not OPS:
        from . import gemm  # noqa: F401  (registers itself)
    try:
        return OPS[name]
    except KeyError:
        raise InvalidArgumentError(f"unknown op {name!r}; hkjit has {', '.join(sorted(OPS))}") from None
