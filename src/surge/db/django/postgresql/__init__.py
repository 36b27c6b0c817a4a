"""Django's PostgreSQL backend with connections pooled across requests by surge.db.

    DATABASES = {"default": {"ENGINE": "surge.db.django.postgresql", "NAME": ..., ...,
                             "OPTIONS": {"pool": {"max_size": 10}}}}

See :mod:`surge.db.django.postgresql.base`.
"""
