"""`hkjit precompile`, `hkjit bundle ...` and `hkjit cache ...`: argument parsers and handlers.

hkjit/cli.py calls `add_parsers(subparsers)`; each handler takes the parsed arguments and returns
the exit status (0 fine, 1 something failed: a compile, a verification)."""

import argparse
import json
import sys
import time

from . import api, deploy, ops
from .errors import InvalidArgumentError
from . import cache as cache_mod


def add_parsers(sub) -> None:
    _add_precompile(sub)
    _add_bundle(sub)
    _add_cache(sub)


def _csv(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 4096:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of compiles from 1 to 4096")
    return value


# ------------------------------------------------------------------------------------ precompile

def _add_precompile(sub):
    p = sub.add_parser("precompile", help="compile every specialisation a manifest names into a bundle (no GPU needed)",
                       description="Cross-compile the specialisations named by a manifest (TOML; see "
                                   "docs/deployment.md) and write them as a bundle for HKJIT_BUNDLE_PATH.")
    p.add_argument("--shapes", "--manifest", dest="manifest", required=True, metavar="FILE",
                   help="manifest file (TOML), e.g. one recorded with HKJIT_RECORD=FILE")
    p.add_argument("--arch", type=_csv, metavar="A,B,...",
                   help="targets to build every entry for (e.g. gfx942,gfx950,sm_90a); replaces the targets "
                        "the manifest names")
    p.add_argument("--ops", type=_csv, metavar="OP,...", help="build only these ops")
    p.add_argument("-o", "--output", required=True, metavar="DIR|FILE.zip",
                   help="bundle to write: a directory, or a single archive when it ends in .zip")
    p.add_argument("-j", "--jobs", type=_positive_int, default=None, help="compiles at a time (default: CPU count)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_precompile)


def cmd_precompile(args) -> int:
    jobs = deploy.load_manifest(args.manifest, archs=args.arch, ops=set(args.ops) if args.ops else None,
                                shape_params=ops.shape_params)
    if not jobs:
        print(f"hkjit: {args.manifest} names no specialisation" + (" for those ops" if args.ops else ""),
              file=sys.stderr)
        return 1
    cache_mod.set_offline(False)   # precompiling is compiling, whatever HKJIT_OFFLINE says
    progress = None if args.no_progress else _progress_for(sys.stderr, len(jobs))
    try:
        report = deploy.precompile(jobs, args.output, build=api.build, parallel=args.jobs, progress=progress)
    finally:
        if progress:
            progress.done()
    if args.json:
        print(json.dumps(_report_json(report), indent=1))
    else:
        print(report.summary())
    return 1 if report.failed else 0


def _report_json(report) -> dict:
    return {
        "bundle": str(report.bundle), "entries": report.entries,
        "compiled": report.count("compiled"), "reused": report.count("reused"), "failed": report.count("failed"),
        "results": [{"op": o.job.op, "target": o.job.target, "params": o.job.param_dict, "status": o.status,
                     "key": o.key, "seconds": round(o.seconds, 3), "error": o.error} for o in report.outcomes],
    }


def _progress_for(stream, total: int):
    """A progress bar (rich, from the `cli` extra) when `stream` is a terminal; otherwise, or without
    rich, one line per finished specialisation, which suits logs."""
    if stream.isatty():
        try:
            return _BarProgress(stream, total)
        except ImportError:
            pass
    return _LineProgress(stream)


class _LineProgress:
    def __init__(self, stream):
        self.stream = stream

    def __call__(self, done: int, total: int, outcome):
        self.stream.write(f"[{done}/{total}] {outcome.status:8s} {outcome.job.describe()} "
                          f"({outcome.seconds:.1f}s)\n")
        self.stream.flush()

    def done(self):
        pass


class _BarProgress:
    """A bar with the count done, the tally by outcome and the time taken; each failure is also
    printed above the bar as it happens."""

    def __init__(self, stream, total: int):
        from rich.console import Console   # only here: `hkjit` itself never imports rich
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        self.counts = {"compiled": 0, "reused": 0, "failed": 0}
        self.bar = Progress(TextColumn("precompile"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[tally]}"), TimeElapsedColumn(),
                            console=Console(file=stream, highlight=False))
        self.task = self.bar.add_task("precompile", total=total, tally=self._tally())
        self.bar.start()

    def _tally(self) -> str:
        return " ".join(f"{k} {v}" for k, v in self.counts.items())

    def __call__(self, done: int, total: int, outcome):
        self.counts[outcome.status] += 1
        if outcome.status == "failed":
            self.bar.console.print(f"failed: {outcome.job.describe()}", markup=False)
        self.bar.update(self.task, completed=done, total=total, tally=self._tally())

    def done(self):
        self.bar.stop()


# --------------------------------------------------------------------------------------- bundle

def _add_bundle(sub):
    p = sub.add_parser("bundle", help="inspect and check precompiled bundles")
    bsub = p.add_subparsers(dest="bundle_command", required=True)
    v = bsub.add_parser("verify", help="check every entry of a bundle against its manifest")
    v.add_argument("paths", nargs="+", metavar="BUNDLE")
    v.set_defaults(func=cmd_bundle_verify)
    ls = bsub.add_parser("ls", help="list a bundle's kernels")
    ls.add_argument("path", metavar="BUNDLE")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_bundle_ls)


def cmd_bundle_verify(args) -> int:
    status = 0
    for path in args.paths:
        problems = deploy.verify_bundle(path)
        if problems:
            status = 1
            print(f"{path}: {len(problems)} problem(s)")
            for line in problems:
                print(f"  {line}")
        else:
            print(f"{path}: OK ({len(deploy.describe_bundle(path))} entries)")
    return status


def cmd_bundle_ls(args) -> int:
    records = deploy.describe_bundle(args.path)
    if args.json:
        print(json.dumps(records, indent=1))
        return 0
    for r in records:
        params = " ".join(f"{k}={v}" for k, v in sorted(r.get("params", {}).items()))
        print(f"{r['key'][:16]}  {r['op']:8s} {r['target']:10s} {_human(r['size']):>8s}  {params}")
    return 0


# ---------------------------------------------------------------------------------------- cache

def _add_cache(sub):
    p = sub.add_parser("cache", help="list, check, prune, clear, export or import the kernel cache")
    csub = p.add_subparsers(dest="cache_command", required=True)
    ls = csub.add_parser("ls", help="list cached kernels, least recently used first")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_cache_ls)
    st = csub.add_parser("stats", help="size and counts")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_cache_stats)
    csub.add_parser("verify", help="check every entry's checksum; set corrupt ones aside").set_defaults(
        func=cmd_cache_verify)
    pr = csub.add_parser("prune", help="evict least recently used entries down to a size")
    pr.add_argument("--max-size", required=True, help="e.g. 2G, 500M (powers of 1024)")
    pr.add_argument("--grace", type=float, default=None,
                    help=f"never evict entries used in the last N seconds (default {cache_mod.PRUNE_GRACE_S:.0f})")
    pr.set_defaults(func=cmd_cache_prune)
    csub.add_parser("clear", help="remove every entry not in use right now").set_defaults(func=cmd_cache_clear)
    ex = csub.add_parser("export", help="write cached kernels as a bundle")
    ex.add_argument("dest", metavar="DIR|FILE.zip")
    ex.add_argument("--ops", type=_csv)
    ex.add_argument("--arch", type=_csv)
    ex.set_defaults(func=cmd_cache_export)
    im = csub.add_parser("import", help="copy a bundle's kernels into the cache")
    im.add_argument("source", metavar="BUNDLE")
    im.set_defaults(func=cmd_cache_import)
    why = csub.add_parser("explain", help="would this specialisation compile, and what makes its key new "
                                          "(the nearest cached key of the op and the parts that differ)")
    why.add_argument("op")
    why.add_argument("--arch", help="gfx942, gfx950 or sm_90a (default: the default device's)")
    why.add_argument("param", nargs="*", help="the op's parameters as NAME=VALUE (as `hkjit inspect`), "
                                              "e.g. rows=4096 hidden=8192 dtype=float16")
    why.set_defaults(func=cmd_cache_explain)


def parse_params(items) -> dict:
    """NAME=VALUE words of the command line: ints where they read as ints, else strings."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise InvalidArgumentError(f"parameter {item!r}: write NAME=VALUE, e.g. block_m=128")
        out[name] = int(value) if value.lstrip("-").isdigit() else value
    return out


def cmd_cache_explain(args) -> int:
    from . import explain
    op = ops.get(args.op)
    if args.arch:
        target = args.arch
    else:
        from . import runtime
        target = runtime.default_device().target
    plan = op.plan(target, **parse_params(args.param))
    print(explain.explain_spec(plan.spec))
    return 0


def cmd_cache_ls(args) -> int:
    infos = sorted(cache_mod.default_cache().entries(), key=lambda i: i.last_used)
    if args.json:
        print(json.dumps([{"key": i.key, "path": str(i.path), "size": i.size, "created": i.created,
                           "last_used": i.last_used, "meta": i.meta, "problem": i.problem} for i in infos], indent=1))
        return 0
    for i in infos:
        what = i.problem or " ".join(f"{k}={v}" for k, v in sorted((i.meta.get("params") or {}).items()))
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(i.last_used))
        print(f"{i.key[:16]}  {i.meta.get('op', '?'):8s} {i.meta.get('target', '?'):10s} "
              f"{_human(i.size):>8s}  {used}  {what}")
    return 0


def cmd_cache_stats(args) -> int:
    stats = cache_mod.default_cache().stats()
    if args.json:
        print(json.dumps(stats, indent=1))
        return 0
    cap = _human(stats["max_size"]) if stats["max_size"] is not None else "none (HKJIT_CACHE_MAX_SIZE)"
    print(f"cache {stats['root']}: {stats['entries']} entries, {_human(stats['bytes'])}, cap {cap}, "
          f"{stats['quarantined']} quarantined")
    for b in stats["bundles"]:
        print(f"bundle {b}")
    return 0


def cmd_cache_verify(args) -> int:
    cache = cache_mod.default_cache()
    problems = cache.verify()
    for path, problem in problems:
        fate = "removed" if problem.startswith("key index record") else f"moved to {cache.root / 'quarantine'}"
        print(f"{path}: {problem} ({fate})")
    print(f"{len(cache.entries())} entries OK, {len(problems)} corrupt")
    return 1 if problems else 0


def cmd_cache_prune(args) -> int:
    cache = cache_mod.default_cache()
    report = cache.prune(args.max_size, grace=args.grace)
    print(f"removed {report['removed']} entries ({_human(report['freed'])}); {report['kept']} left "
          f"({_human(report['bytes'])}); {report['skipped_in_use']} in use were kept")
    return 0


def cmd_cache_clear(args) -> int:
    report = cache_mod.default_cache().clear()
    print(f"removed {report['removed']} entries ({_human(report['freed'])})"
          + (f"; {report['skipped_in_use']} in use were kept" if report["skipped_in_use"] else ""))
    return 0


def cmd_cache_export(args) -> int:
    count = deploy.export_cache(cache_mod.default_cache(), args.dest, ops=args.ops, targets=args.arch)
    print(f"exported {count} entries to {args.dest}")
    return 0


def cmd_cache_import(args) -> int:
    cache = cache_mod.default_cache()
    count = deploy.import_bundle(cache, args.source)
    print(f"imported {count} entries from {args.source} into {cache.root}")
    return 0


def _human(size) -> str:
    if size < 1024:
        return f"{size} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}"
