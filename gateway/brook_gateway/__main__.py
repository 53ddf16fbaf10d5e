"""`python -m brook_gateway` and the `brook-gateway` console script."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from brook.server import service_main
from brook_gateway.app import SPEC


def main(argv: Sequence[str] | None = None) -> int:
    return service_main(SPEC, argv)


if __name__ == "__main__":
    sys.exit(main())
