"""``python -m docgen [--check]``: write the generated reference pages, or check them."""

from __future__ import annotations

import argparse
import sys

from docgen.targets import REGENERATE, ROOT, TARGETS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docgen", description=__doc__)
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is stale"
    )
    args = parser.parse_args(argv)
    stale = [t for t in TARGETS if t.stale()]
    if args.check:
        for target in stale:
            print(f"stale: {target.path} (run {REGENERATE})")
        return 1 if stale else 0
    for target in TARGETS:
        path = ROOT / target.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(target.render(), encoding="utf-8")
        print(f"{'wrote' if target in stale else 'same '} {target.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
