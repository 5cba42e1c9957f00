"""``python -m bench.soak [arguments]`` (``bin/soak`` sets the defaults up): the soak's own database and
Redis first, then Django, then the run. Exits 1 on any problem (see ``bench/soak/__init__.py``)."""

import sys

import django

from bench.soak.environment import arguments, soak_services_use


def main() -> int:
    args = arguments()
    redis = soak_services_use(args)  # sets the environment Django's settings read
    django.setup()
    from bench.soak.run import soak_run  # imports the models: only once Django is set up

    return soak_run(args, redis)


if __name__ == "__main__":
    sys.exit(main())
