"""The S3 write-up: boto3's bucket.objects.all(), one page after another.

python s3_boto3_listing.py ENDPOINT BUCKET   (credentials from the environment)
"""

import sys

import boto3
from botocore.config import Config

endpoint, bucket = sys.argv[1], sys.argv[2]
s3 = boto3.resource(
    "s3",
    endpoint_url=endpoint,
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}),
)
count = sum(1 for _ in s3.Bucket(bucket).objects.all())
print("objects:", count)
