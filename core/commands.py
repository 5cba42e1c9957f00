"""Small helpers shared by the manage.py commands of every app."""

import argparse

from core.numbers import NumberInvalid, number_whole


def int_between(low: int, high: int):
    """An argparse type: a whole number from ``low`` to ``high`` (``core.numbers``), with a readable error otherwise."""

    def parse(value: str) -> int:
        try:
            return number_whole(value, low=low, high=high)
        except NumberInvalid as exc:
            raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None

    return parse
