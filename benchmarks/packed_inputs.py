"""Would compressing the client's retained copy of each shard's inputs pay?

Run it from the repository root (a few seconds, no network)::

    python benchmarks/packed_inputs.py

``run_shards`` keeps every in-flight shard's packed inputs (``pack_inputs``:
three columns through marshal) to send them again if the shard's worker dies
or retires: at most 6 shards per worker, so hundreds of MB at 100 workers.
This measures, per shard of 10,000 inputs read by ``read_inputs`` as the CLI
reads them, the bytes kept as packed and as zlib (level 1 and 6) of the packed
bytes, and the CPU (``process_time``, best of 30) to pack, to compress and to
decompress. The bar set for keeping a compressed copy: memory cut 3x or more
for 5 ms of CPU or less per shard.

The inputs: the simulated web's host names as URLs, top-sites-style names
numbered in sequence (as URLs, and as a ``rank,domain`` CSV through
``--template``), and names with a real list's variety (made up here from
syllables and a mix of TLDs, seeded): sequential numbers compress far better
than real names, so the last row is the one to judge by. Results go to
``benchmarks/results/packed_inputs.json``.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

from _common import Table, Target, announce, machine_info, payload, write_json
from surge.bulk.inputs import read_inputs
from surge.bulk.shards import pack_inputs
from surge.sim import hosts

SHARD = 10_000
#: In-flight shards at 100 workers (MAX_SHARDS_PER_WORKER = 6).
KEPT_SHARDS = 600
REPEAT = 30


def varied_domains(n: int, seed: int = 7) -> list[str]:
    """``n`` made-up domains about as varied as a real top-sites list's."""
    rng = random.Random(seed)
    syllables = [a + b for a in "bcdfghjklmnprstvwz" for b in "aeiou"]
    syllables += ["ing", "net", "hub", "app", "soft", "tech", "news", "shop"]
    tlds = ["com"] * 50 + ["org"] * 8 + ["net"] * 8
    tlds += ["de", "ru", "co.uk", "io", "jp", "fr", "br", "in", "it", "cn", "nl", "pl", "au", "es"]
    names = []
    for _ in range(n):
        name = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 5)))
        if rng.random() < 0.2:
            name += "-" + "".join(rng.choice(syllables) for _ in range(rng.randint(1, 3)))
        names.append(f"{name}.{rng.choice(tlds)}")
    return names


def inputs(folder: Path) -> dict[str, tuple[Path, str | None]]:
    """Each case's input file, and its --template."""
    numbered = [f"example-site-{i}.com" for i in range(1000, 1000 + SHARD)]
    files = {
        "sim hosts as URLs (http://siteN.sim:PORT/)": (
            "sim.txt",
            [f"http://{h}:41234/" for h in hosts(SHARD)],
            None,
        ),
        "numbered URLs (https://www.example-site-N.com/path)": (
            "numbered.txt",
            [f"https://www.{d}/path" for d in numbered],
            None,
        ),
        "numbered rank,domain CSV, --template https://www.{}/path": (
            "numbered.csv",
            [f"{n},{d}" for n, d in enumerate(numbered, 1)],
            "https://www.{}/path",
        ),
        "varied rank,domain CSV, --template https://www.{}/": (
            "varied.csv",
            [f"{n},{d}" for n, d in enumerate(varied_domains(SHARD), 1)],
            "https://www.{}/",
        ),
    }
    cases = {}
    for name, (file, lines, template) in files.items():
        path = folder / file
        path.write_text("".join(line + "\n" for line in lines))
        cases[name] = (path, template)
    return cases


def cpu_ms(fn: Callable[..., object], *args: Any) -> float:
    """The least CPU time of ``REPEAT`` calls of ``fn(*args)``, in ms."""
    best = float("inf")
    for _ in range(REPEAT):
        start = time.process_time()
        fn(*args)
        best = min(best, time.process_time() - start)
    return best * 1e3


def main() -> int:
    started = time.perf_counter()
    info = machine_info()
    announce("packed inputs: kept as they are, or compressed", info, quick=False)
    table = Table(
        f"per shard of {SHARD:,} inputs",
        [
            "inputs",
            "packed",
            "zlib-1",
            "x",
            "zlib-6",
            "x",
            "pack ms",
            "zlib-1 ms",
            "zlib-6 ms",
            "unzip ms",
        ],
    )
    results: dict[str, Any] = {}
    targets = []
    with tempfile.TemporaryDirectory() as folder:
        for name, (path, template) in inputs(Path(folder)).items():
            items = list(islice(read_inputs(path, template=template), SHARD))
            packed = pack_inputs(items)
            fast, small = zlib.compress(packed, 1), zlib.compress(packed, 6)
            row = {
                "packed_bytes": len(packed),
                "zlib1_bytes": len(fast),
                "zlib6_bytes": len(small),
                "pack_ms": cpu_ms(pack_inputs, items),
                "zlib1_ms": cpu_ms(zlib.compress, packed, 1),
                "zlib6_ms": cpu_ms(zlib.compress, packed, 6),
                "unzip1_ms": cpu_ms(zlib.decompress, fast),
            }
            results[name] = row
            ratio1, ratio6 = len(packed) / len(fast), len(packed) / len(small)
            table.add(
                name,
                f"{len(packed):,}",
                f"{len(fast):,}",
                f"{ratio1:.1f}",
                f"{len(small):,}",
                f"{ratio6:.1f}",
                f"{row['pack_ms']:.2f}",
                f"{row['zlib1_ms']:.2f}",
                f"{row['zlib6_ms']:.2f}",
                f"{row['unzip1_ms']:.2f}",
            )
            kept = KEPT_SHARDS * len(packed) / 1e6
            table.note(
                f"{name}: {KEPT_SHARDS} shards kept = {kept:.0f} MB packed, "
                f"{kept / ratio1:.0f} MB zlib-1"
            )
            targets.append(
                Target(
                    f"zlib-1 worth keeping: {name}",
                    ">= 3x smaller for <= 5 ms a shard",
                    f"{ratio1:.1f}x for {row['zlib1_ms']:.1f} ms",
                    ratio1 >= 3 and row["zlib1_ms"] <= 5,
                )
            )
    table.print()
    for target in targets:
        print("  " + target.line())
    settings = {"shard": SHARD, "kept_shards": KEPT_SHARDS, "repeat": REPEAT}
    out = Path(__file__).parent / "results" / "packed_inputs.json"
    write_json(out, payload("packed_inputs", info, settings, results, targets, started))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
