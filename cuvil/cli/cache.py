"""`cuvil cache info|clear`: what the cache directory holds, and emptying it.

    $ cuvil cache info
    cache: /root/.cache/cuvil (limit 2048 MB, CUVIL_CACHE_MAX_MB)
      graphs       12 entries    1.20 MB
      ...
    $ cuvil cache clear --only graphs
"""

from __future__ import annotations

import argparse

from cuvil.disk_store import KINDS


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "cache", help="show or clear the compile cache",
        description="The cache directory ($CUVIL_CACHE_DIR, else $XDG_CACHE_HOME/cuvil, else "
                    "~/.cache/cuvil): compiled programs, optimized and imported graphs, "
                    "kernel modules, checked rule libraries and Numba's compiled drivers.")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    info = sub.add_parser("info", help="what the cache holds, per part")
    info.set_defaults(run=run_info)
    clear = sub.add_parser("clear", help="remove cached entries")
    clear.add_argument("--only", action="append", choices=KINDS, metavar="PART",
                       help=f"clear only this part ({', '.join(KINDS)}; repeatable)")
    clear.set_defaults(run=run_clear)


def run_info(args: argparse.Namespace) -> int:
    from cuvil.cache import remote
    from cuvil.disk_store import max_bytes, usage
    from cuvil.paths import cache_dir

    print(f"cache: {cache_dir()} (limit {max_bytes() / 1e6:.0f} MB, CUVIL_CACHE_MAX_MB)")
    total = 0
    for kind, (count, size) in usage().items():
        total += size
        print(f"  {kind:<8} {count:>6} entries  {size / 1e6:>9.2f} MB")
    print(f"  {'total':<8} {'':>14}  {total / 1e6:>9.2f} MB")
    print(f"shared: {remote.url() or 'none (set CUVIL_CACHE_REDIS=redis://host:port)'}")
    return 0


def run_clear(args: argparse.Namespace) -> int:
    from cuvil.disk_store import clear, usage

    kinds = tuple(args.only or KINDS)
    before = usage()
    clear(kinds)
    freed = sum(before[k][1] for k in kinds)
    print(f"cleared {', '.join(kinds)}: {freed / 1e6:.2f} MB")
    return 0
