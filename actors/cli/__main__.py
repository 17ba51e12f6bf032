"""`python -m actors.cli`: the same as the `actorlog` console script."""

from __future__ import annotations

from actors.cli import main

if __name__ == "__main__":
    main()
