"""surge.bench: what surge is measured against.

``surge.bench.peers`` runs the clients people use today (requests in a loop, a
thread pool, multiprocessing, grequests, aiohttp, httpx, pycurl, pyreqwest) the
way their write-ups do, each in a process of its own, on the same inputs as
surge; ``surge demo`` and ``benchmarks/fetch.py`` put them side by side.
"""
