"""The precompile manifest's format (TOML, see docs/deployment.md): its version, how keyword
arguments are written into it, and the text hkjit writes for one specialisation.

Reading and expanding manifests is deploy's business; this module only writes, through tomli_w
(imported on first use: `import hkjit` and an unrecorded run never pay for it).
"""

from .errors import InvalidArgumentError

MANIFEST_VERSION = 1


def plain_params(params: dict) -> dict:
    """Keyword arguments as TOML can hold them, sorted by name: None (a default) is dropped; dtype
    objects and the like become their names."""
    out = {}
    for name, value in sorted(params.items()):
        if value is None:
            continue
        if not isinstance(value, (bool, int, float, str)):
            value = getattr(value, "name", None) if isinstance(getattr(value, "name", None), str) else str(value)
        out[str(name)] = value
    return out


def _entry(op: str, target: str, params: dict) -> dict:
    return {"op": op, "target": target, **plain_params(params)}


def _pairs(table: dict) -> list[str]:
    """`key = value` for each entry of a table of scalars, one line each (tomli_w escapes newlines
    in strings, since it is not asked for multi-line strings)."""
    import tomli_w
    return [tomli_w.dumps({key: value}).rstrip("\n") for key, value in table.items()]


def manifest_line(op: str, target: str, params: dict) -> str:
    """The one line that adds this specialisation to a manifest's `kernels = [...]` array: an
    inline table and a comma, e.g. `{ op = "gemm", target = "gfx950", k = 8192, m = 8192 },`."""
    return "{ " + ", ".join(_pairs(_entry(op, target, params))) + " },"


def kernel_table(op: str, target: str, params: dict) -> str:
    """This specialisation as one `[[kernel]]` table. Each such block is whole on its own, so a
    recording can append one block at a time and the file stays a valid manifest after each."""
    return "\n".join(["[[kernel]]", *_pairs(_entry(op, target, params))]) + "\n"


def dumps(doc: dict) -> str:
    """A whole manifest (or any table) as TOML text that `tomllib.loads` reads back equal."""
    import tomli_w
    try:
        return tomli_w.dumps(doc)
    except TypeError as e:
        raise InvalidArgumentError(f"cannot write this manifest as TOML ({e}); values must be str, int, "
                                   "float, bool, lists or tables of them") from None
