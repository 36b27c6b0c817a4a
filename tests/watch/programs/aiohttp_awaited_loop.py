"""requests awaited one after another from a coroutine (aiohttp): asynchronous
code that is serial all the same.

python aiohttp_awaited_loop.py HTTP_PORT N
"""

import asyncio
import sys

import aiohttp

from surge.sim import patch_getaddrinfo

patch_getaddrinfo()  # *.sim -> the simulated web on 127.0.0.1
port, n = int(sys.argv[1]), int(sys.argv[2])


async def main() -> None:
    ok = 0
    resolver = aiohttp.ThreadedResolver()  # the patched getaddrinfo, in a thread
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=resolver)) as s:
        for i in range(n):
            url = f"http://host{i}--delay-50.sim:{port}/page?id={i}"
            async with s.get(url, timeout=aiohttp.ClientTimeout(total=10)) as response:
                await response.read()
                ok += response.status == 200
    print("ok:", ok)


asyncio.run(main())
