"""Django database backends on surge.db's pool: ``ENGINE: "surge.db.django.mysql"``."""
