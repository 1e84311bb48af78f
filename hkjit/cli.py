"""The `hkjit` command: info, inspect, and (from hkjit.cli_deploy) precompile, bundle, cache."""

import argparse
import json
import os
import sys

from ._version import __version__
from .errors import DTypeError, HKJitError, InvalidArgumentError, TargetError, UnsupportedArrayError

USAGE, FAILURE = 2, 1                      # exit statuses: the command line was wrong; the work failed
_USAGE_ERRORS = (InvalidArgumentError, TargetError, DTypeError, UnsupportedArrayError)


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (the usage is one `--help` away)."""

    def error(self, message):
        self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _devices():
    from . import runtime
    out = []
    for kind in ("cuda", "rocm"):
        for i in range(runtime.gpu_count(kind)):
            try:
                dev = runtime.get(kind, i)
                out.append(f"{kind}:{i}  {dev.name}  target {dev.target.id}")
            except HKJitError as e:
                out.append(f"{kind}:{i}  unusable: {e}")
    return out


def cmd_info(args):
    from . import cache, compiler
    print(f"hkjit {__version__}")
    print("devices:")
    devs = _devices()
    for d in devs or ["none (no CUDA or ROCm GPU found; 'sim:gfx942' and 'sim:gfx950' run on the CPU)"]:
        print(f"  {d}")
    print("compilers:")
    for name, ident in compiler.available():
        print(f"  {name:7s} {ident}")
    c = cache.default_cache()
    stats = c.stats()
    print(f"cache: {c.root}")
    print(f"  entries {stats.get('entries', 0)}, {stats.get('bytes', 0) / 1e6:.1f} MB")
    return 0


def _parse_overrides(items):
    from .cli_deploy import parse_params     # NAME=VALUE words, shared with `hkjit cache explain`
    return parse_params(items)


def cmd_inspect(args):
    from . import api, ops, static
    op = ops.get(args.op)
    params = _parse_overrides(args.param)
    if args.shape:
        try:
            dims = [int(x) for x in args.shape.replace("x", ",").split(",")]
        except ValueError:
            dims = []
        if len(dims) != len(op.shape_params):
            raise InvalidArgumentError(f"--shape {args.shape!r}: give {','.join(op.shape_params).upper()} for {op.name} "
                             "(integers, comma-separated)")
        params.update(zip(op.shape_params, dims))
    if args.dtype:
        params["dtype"] = args.dtype
    report = api.inspect(args.op, args.arch, **params)
    if args.json:
        json.dump(report, sys.stdout, indent=2, default=str)
        print()
    else:
        print(static.format_report(report))
    return 0


def cmd_bench(args):
    from . import ops
    from .bench import suite
    for name in args.ops:
        ops.get(name)   # an unknown op is an error, not an empty run
    sections = tuple(x.strip() for x in args.sections.split(",") if x.strip()) if args.sections else suite.SECTIONS
    suite.run(tuple(args.ops) or None, quick=args.quick, json_path=args.json, plot_dir=args.plot,
              markdown_path=args.markdown, merge_paths=args.merge, gpu=not args.no_gpu, sections=sections,
              rounds=args.rounds)
    return 0


def build_parser():
    p = _Parser(prog="hkjit", description="hkjit: JIT tile kernels for gfx942, gfx950 and sm_90a")
    p.add_argument("--version", action="version", version=f"hkjit {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    info = sub.add_parser("info", help="devices, compilers and the cache")
    info.set_defaults(func=cmd_info)
    ins = sub.add_parser("inspect", help="static figures of a compiled op (registers, LDS, spills, instructions)")
    ins.add_argument("op")
    ins.add_argument("--arch", required=True, help="gfx942, gfx950 or sm_90a (comma-separated for several)")
    ins.add_argument("--shape", help="the op's shape parameters in order (gemm: M,N,K); default: the op's own")
    ins.add_argument("--dtype", help="bfloat16 (default) or float16")
    ins.add_argument("--json", action="store_true", help="print JSON")
    ins.add_argument("param", nargs="*", help="more parameters as NAME=VALUE (e.g. block_m=128 a_layout=col)")
    ins.set_defaults(func=cmd_inspect)
    bench = sub.add_parser("bench", help="hkjit against its peers in one process; JIT figures; static AMD report")
    bench.add_argument("ops", nargs="*", help="ops to benchmark (default: all)")
    bench.add_argument("--quick", action="store_true", help="fewer shapes")
    bench.add_argument("--json", help="write all results as JSON")
    bench.add_argument("--plot", help="write PNG plots into this folder")
    bench.add_argument("--markdown", help="write the report (e.g. docs/benchmarks.md)")
    bench.add_argument("--merge", nargs="*", default=(), metavar="JSON",
                       help="take sections this run cannot measure from earlier --json results")
    bench.add_argument("--no-gpu", action="store_true", help="skip the GPU sections even if a GPU is present")
    bench.add_argument("--sections", help="run only these, comma-separated: peers (each op against its peers, GPU), "
                                          "jit (hot path and warm start, GPU), cold (cold compile), amd (AMD static "
                                          "report and simulator); default: all")
    bench.add_argument("--rounds", type=int, help="alternating rounds per shape for GEMM and attention (default 3)")
    bench.set_defaults(func=cmd_bench)
    try:
        from . import cli_deploy
        cli_deploy.add_parsers(sub)
    except ImportError:
        pass
    return p


def _parse(parser, argv):
    """Arguments; NAME=VALUE parameters of `inspect` may also come after its options."""
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "param", None) is not None and all(not e.startswith("-") for e in extra):
        args.param = [*args.param, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _one_line(error) -> str:
    lines = str(error).strip().splitlines() or [type(error).__name__]
    where = getattr(error, "source_path", None)
    return lines[0] + (f" (generated source: {where}; the compiler's output is in the Python error)"
                       if where and len(lines) > 1 else "")


def main(argv=None):
    parser = build_parser()
    args = _parse(parser, argv)
    try:
        status = args.func(args) or 0
        sys.stdout.flush()          # here, so a full disk or closed pipe on stdout is reported below
        return status
    except BrokenPipeError:  # `hkjit inspect ... | head`: the reader left, which is not an error
        _drop_stdout()
        return 0
    except HKJitError as e:
        status = USAGE if isinstance(e, _USAGE_ERRORS) else FAILURE
        print(f"hkjit: error: {_one_line(e)}", file=sys.stderr)
    except OSError as e:     # an output path that cannot be written, /dev/full, a full disk
        print(f"hkjit: error: {e.strerror or e}" + (f": {e.filename}" if e.filename else ""), file=sys.stderr)
        status = FAILURE
    try:
        sys.stdout.flush()
    except OSError:          # stdout itself is what failed
        _drop_stdout()
    return status


def _drop_stdout():
    """Point stdout at /dev/null, so the interpreter's final flush of unwritable output is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
