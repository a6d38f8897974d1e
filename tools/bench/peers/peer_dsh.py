"""dsh: the same measurement as tools/bench/bench_delegation.py (in-memory sessions),
printed as a peer worker's JSON: a parent's turn whose tool is the ``subagent`` tool on
the ``spawn`` provider (the child's scripted model answers at once), against the same
turn whose tool returns a constant. Run with the project's environment.
"""

from __future__ import annotations

import asyncio
import json
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/bench: _bench, the bench

from bench_delegation import measure

if __name__ == "__main__":
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    delegating, constant = asyncio.run(measure(None, iterations))
    print(
        json.dumps(
            {
                "version": f"dsh {version('dsh-core')}",
                "delegating": delegating.samples,
                "constant": constant.samples,
            }
        )
    )
