"""The grequests write-up: grequests over HTTPS under gevent, with pyOpenSSL
injected into urllib3 (old advice for SNI, still found in programs).

    python grequests_pyopenssl.py HTTPS_PORT CAFILE N [--no-pyopenssl]
"""

import grequests  # noqa: I001 - patches with gevent first, as its users' programs do

import sys

import urllib3.contrib.pyopenssl

from surge.sim import patch_getaddrinfo

if "--no-pyopenssl" not in sys.argv:
    urllib3.contrib.pyopenssl.inject_into_urllib3()
patch_getaddrinfo()
port, cafile, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
urls = [f"https://host{i}--delay-50.sim:{port}/" for i in range(n)]
responses = grequests.map((grequests.get(u, timeout=20, verify=cafile) for u in urls), size=n)
print("ok:", sum(r is not None and r.status_code == 200 for r in responses))
