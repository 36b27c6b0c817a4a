"""The twin: surge.s3's listing (pages pipelined, prefixes in parallel).

python s3_surge_listing.py ENDPOINT BUCKET   (credentials from the environment)
"""

import sys

import surge.s3

endpoint, bucket = sys.argv[1], sys.argv[2]
count = sum(
    1 for _ in surge.s3.list_all(f"s3://{bucket}", endpoint_url=endpoint, region="us-east-1")
)
print("objects:", count)
