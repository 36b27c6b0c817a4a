"""Django's MySQL/MariaDB backend with connections pooled across requests by surge.db.

    DATABASES = {"default": {"ENGINE": "surge.db.django.mysql", "NAME": ..., ...,
                             "OPTIONS": {"pool": {"max_size": 10}}}}

See :mod:`surge.db.django.mysql.base`.
"""
